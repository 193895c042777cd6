"""Pull (step, metric values) out of one line of a trainer's stdout.

Covers the formats of tests/data/trainer_logs (see its SOURCES.md): HF Trainer dicts and bars,
Lightning bars and callbacks, mmcv/mmengine, Keras, fairseq (old, simple, json), litgpt, DeepSpeed,
Megatron, torchtitan, timm, nanoGPT, llm.c, nanochat, detectron2, mlx-lm, Composer/OLMo multi-line
records, JSON lines; the table formats (ultralytics, detectron2's `|` tables) are textlog_tables.py's.
A line is read as `key <sep> number` pairs (see textlog_tokens); per-format rules supply the step and
the few lines that mean something else. Epoch-and-batch counters become `epoch * batches + batch` with
epochs counted from 0 (trainers that print epochs from 1 get `(epoch - 1) * batches + batch`). Lines
without a step get None: the reader carries the step of the nearest earlier line that had one.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from guarded_sbatch.sources.textlog_tokens import (
    HEAD, NUMBER, cell_pairs, clean_line, find_bar, find_dict, find_pairs, parse_number, parse_timestamp, strip_headers,
)

_N = NUMBER.pattern
# (pattern, epochs counted from 1): step = (epoch - base) * batches + batch
_EPOCH_BATCH = [
    (re.compile(r"\bEpoch(?:\(train\))?\s{0,4}\[\s{0,8}(?P<epoch>\d+)\]\[\s{0,12}(?P<batch>\d+)/(?P<total>\d+)\]"), 1),
    (re.compile(r"^Epoch: \[(?P<epoch>\d+)\]\[\s{0,12}(?P<batch>\d+)/(?P<total>\d+)\]"), 0),
    (re.compile(r"^Train: (?P<epoch>\d+) \[\s{0,12}(?P<batch>\d+)/(?P<total>\d+)"), 0),
    (re.compile(r"\| epoch\s{1,8}(?P<epoch>\d+) \|\s{0,12}(?P<batch>\d+)/\s{0,12}(?P<total>\d+) batches"), 1),
    (re.compile(r"\bepoch (?P<epoch>\d+):\s{1,12}(?P<batch>\d+) / (?P<total>\d+)"), 1),
]
# each pattern with a literal every match of it holds (case as written): a line without it skips the regex
_ITER_COUNTER = re.compile(r"\bIter(?:\(train\))?\s{0,4}\[\s{0,12}(\d+)/\d+\]")
# `train_batch_loss[ 6510 ]:  1.57`: a name indexed by the step, then its value
_EPOCH_BATCH_LITERALS = ("Epoch", "Epoch: [", "Train: ", "| epoch", "epoch ")
_INDEXED_KEY = re.compile(r"^(?![Ee]poch)(\s{0,8}[A-Za-z_][\w./-]{0,80})\[\s{0,8}(\d{1,12})\s{0,8}\](?=\s{0,4}[:=])")
# `Reward: mean=3.06, min=1.92, max=10.06`: one quantity's statistics, named `Reward/mean`, ... (a sibling line's
# `Steps: mean=1000.0` names its own)
_LABELLED_FIELDS = re.compile(r"^\s{0,8}([A-Z][A-Za-z]{1,30}):\s{1,4}(?=[a-z_]\w{0,30}=[^=,]{1,40},\s{0,4}[a-z_]\w{0,30}=)")
_LITGPT = re.compile(r"\biter (\d+) step \d+\b")
_EXPLICIT_STEPS = [
    re.compile(r"\bglobal[_ ]step[=: ]\s{0,8}(\d+)"),
    re.compile(r"\bat iteration (\d+)"),
    re.compile(r"\bvalidate step:\s{0,8}(\d+)"),
    re.compile(r"\b(?:for|at) step:?\s{0,4}(\d+)\b"),  # `Evaluation result for step 435000: loss = ...`
]
_EXPLICIT_STEP_LITERALS = ("global", "at iteration ", "validate step:", " step")
_STEP_KEYS = ("global_step", "global step", "num_updates", "step", "_step", "s", "iteration", "iter", "it",
              "batch", "update step")
_IGNORED_KEYS = {"rank", "local_rank", "v_num", "eta", "epoch", "train", "test", "iteration", "iter", "batch",
                 "validation loss at iteration", "validate step", "global step", "micro_step", "default", "day",
                 "days", "line", "pid", "node", "gpu", "device", "epoch(train)", "epoch(val)", "iter(train)",
                 "iter(val)", "epoch(test)", "update", "using"}
_EVAL_LINE = re.compile(
    r"validation loss at iteration|validate step|\bvalid(?:ation)? on\b|^\| valid \||\| valid \||^Test: \[|"
    r"\bend of epoch\b|^Eval |^Evaluation\b|^(?:Epoch|Iter)\((?:val|test)\)|\| INFO \| valid \||"
    r"(?<![\w/.-])(?:val|valid|validation|eval|evaluation|dev|test)\s?:\s", re.IGNORECASE)  # `stats, val: loss = 3.3`
# what every match of _EVAL_LINE holds, lower-cased (on ASCII text no other case folding applies)
_EVAL_LINE_NEEDLES = ("valid", "test", "end of epoch", "eval", "(val)", "val:", "val :", "dev:", "dev :")
_EVAL_WORDS = re.compile(r"(?:^|[\W_])(eval|val|valid|validation|test|tel|dev)(?:$|[\W_])", re.IGNORECASE)
_LOSS_SCALE_EVENTS = [
    re.compile(rf"[Rr]educing dynamic loss scale from {_N} to (?P<value>{_N})"),
    re.compile(rf"reducing (?:loss scale )?to (?P<value>{_N})"),
    re.compile(rf"setting loss scale to:?\s{{0,4}}(?P<value>{_N})"),
    re.compile(rf"loss scale (?:reduced|decreased|lowered) to:?\s{{0,4}}(?P<value>{_N})", re.IGNORECASE),
]
_OVERFLOW_ITERATION = re.compile(r"overflow on iteration:?\s{0,4}(\d+)", re.IGNORECASE)
_SPECIAL_PAIRS = [
    re.compile(rf"'(?P<key>[\w/.\-]{{1,120}})' reached (?P<value>{_N})"),
    re.compile(rf"Monitored metric (?P<key>[\w/.\-]{{1,120}}) = (?P<value>{_N})"),
]
_HF_MARKERS = {"loss", "eval_loss", "grad_norm", "learning_rate", "train_runtime", "train_loss"}
_HF_HEADER = re.compile(r"^(Num examples|Num Epochs|Total optimization steps|Gradient Accumulation steps"
                        r"|Instantaneous batch size per device|Total train batch size.{0,60}|Number of trainable"
                        r" parameters|Num Batches|Batch size) = ([\d,]+)")
_KERAS_EPOCH = re.compile(r"^Epoch (\d+)/(\d+)$")
_MODULE_PATH = re.compile(r"[a-z_]+(?:\.[a-z_0-9]+)+")
_DICT_STEP_KEYS = ("global_step", "train/global_step", "trainer/global_step", "step", "num_updates", "iteration",
                   "iter", "_step")
_DEBUG_DICT = re.compile(r"device=|grad_fn=")
_RICH_BAR = re.compile(r"Epoch (?P<epoch>\d+)/\d+\s+[━╸╺╴╶─ ]{1,400}\s(?P<n>\d+)/(?P<total>\d+)\b")
# a model's size as printed at start-up (`model params: 0.42M`, Lightning's summary: `Trainable params: 9`, `Total
# params`, `Total estimated model params size (MB)`, `Modules in train mode`, `Total FLOPs`; HF's `num_parameters`)
_BANNER = re.compile(r"\b(?:params|parameters|num_parameters|n_params|FLOPs)\b\s*(?:size\s*\(\w+\)\s*)?[:=]"
                     r"|^\s*[\d.,]+\s*[KMGT]?\s+(?:Trainable|Non-trainable|Total) params|^Modules in \w+ mode:",
                     re.IGNORECASE)
_BANNER_NEEDLES = ("param", "flops", "modules in")  # as _EVAL_LINE_NEEDLES, for _BANNER
_VALID_CELL = re.compile(r"\|\s?valid\s?\|")
_HEADERLESS_ROW = re.compile(rf"[A-Za-z][\w\-]{{0,30}}(?:\s+(?:{_N})%?){{3,64}}\s*")
_ROW_NAME = re.compile(r"[A-Za-z_][\w./\-]{0,80}")


@dataclass
class ParsedLine:
    values: dict[str, float] = field(default_factory=dict)
    step: int | None = None  # the line's own step; None: the reader carries one
    is_eval: bool = False
    kind: str = ""  # "", "hf_dict", "hf_summary", "hf_header", "loss_scale", "overflow", "epoch_header", "bar"
    wall_time: float = 0.0
    bar: tuple[int, int, bool] | None = None  # tqdm (n, total, has a description)
    header: dict[str, int] = field(default_factory=dict)  # HF's `Num Epochs = 3`...


def _with_eval_prefix(key: str, is_eval: bool) -> str:
    if is_eval and not _EVAL_WORDS.search(key):
        return "eval/" + key
    return key


def _is_step_key(key: str) -> bool:
    lowered = key.lower()
    return lowered in _STEP_KEYS or lowered.endswith(("num_updates", "/global_step", "_global_step"))


def _dict_line(message: str, found: tuple[dict[str, float], int, int], wall: float) -> ParsedLine | None:
    pairs, start, end = found
    if (message.find("device=", start, end) >= 0 or message.find("grad_fn=", start, end) >= 0) and _DEBUG_DICT.search(
            message, start, end):
        return None  # a printed tensor dict (detectron2's loss_dict after its exception)
    parsed = ParsedLine(wall_time=wall)
    prefix = message[:start]
    parsed.is_eval = "|" in prefix and _VALID_CELL.search(prefix) is not None
    for step_key in (*_DICT_STEP_KEYS, *(k for k in pairs if k.endswith("num_updates"))):
        value = pairs.get(step_key)
        if value is not None and math.isfinite(value):
            parsed.step = int(value)
            pairs = {k: v for k, v in pairs.items() if k != step_key}
            break
    else:
        epoch = pairs.get("epoch")
        if "train_runtime" in pairs:
            parsed.kind = "hf_summary"
        elif pairs.keys() & _HF_MARKERS and (epoch is None or not math.isfinite(epoch) or epoch != int(epoch)
                                             or "learning_rate" in pairs or "eval_loss" in pairs):
            parsed.kind = "hf_dict"
            parsed.is_eval = any(k.startswith(("eval_", "test_")) for k in pairs)
        elif epoch is not None and math.isfinite(epoch):
            parsed.step = int(epoch)  # DeiT-style epoch records: the epoch is the axis
            pairs = {k: v for k, v in pairs.items() if k != "epoch"}
        elif pairs.keys() & _HF_MARKERS:
            parsed.kind = "hf_dict"
    if parsed.is_eval and parsed.kind != "hf_dict":
        parsed.values = {_with_eval_prefix(k, True): v for k, v in pairs.items()}
    else:
        parsed.values = pairs  # (a dict of its own: find_dict's, or the copy without the step)
    return parsed


def _loss_scale_event(message: str, wall: float) -> ParsedLine | None:
    if "scale" not in message:
        return None
    for pattern in _LOSS_SCALE_EVENTS:
        event = pattern.search(message)
        if event is not None:
            iteration = _OVERFLOW_ITERATION.search(message)
            step = int(iteration.group(1)) if iteration else None
            # every scale event is a step the optimizer skipped on an overflow (DeepSpeed's `OVERFLOW! ... Attempted
            # loss scale: 1, reducing to 1` keeps the scale where it was): `overflow` marks it for the judge
            return ParsedLine({"loss_scale": parse_number(event["value"]), "overflow": 1.0}, step, kind="loss_scale",
                              wall_time=wall)
    return None


def _step_from(message: str, found: dict[str, float]) -> int | None:
    litgpt = _LITGPT.search(message) if "iter " in message else None
    if litgpt is not None:
        return int(litgpt.group(1))
    for literal, pattern in zip(_EXPLICIT_STEP_LITERALS, _EXPLICIT_STEPS):
        match = pattern.search(message) if literal in message else None
        if match is not None:
            return int(match.group(1))
    lowered = {k.lower(): v for k, v in found.items()}
    for key, value in lowered.items():
        if key.endswith(("global_step", "num_updates")) and math.isfinite(value):
            return int(value)
    for literal, (pattern, base) in zip(_EPOCH_BATCH_LITERALS, _EPOCH_BATCH):
        match = pattern.search(message) if literal in message else None
        if match is not None:
            return max(0, int(match["epoch"]) - base) * int(match["total"]) + int(match["batch"])
    counter = _ITER_COUNTER.search(message) if "Iter" in message else None
    if counter is not None:
        return int(counter.group(1))
    for step_key in _STEP_KEYS:
        step_value = lowered.get(step_key)
        if step_value is not None and math.isfinite(step_value):
            return int(step_value)
    return None


def _keep(key: str, message: str, position: int) -> bool:
    kind = _KEY_KINDS.get(key)
    if kind is None:
        kind = _key_kind(key)
    if kind == _MODULE:  # `[olmo.train:816, rank=0]`: a logger's name and line number
        return message[position - 1 : position] != ":"
    return kind == _KEPT


_KEPT, _DROPPED, _MODULE = 0, 1, 2
_KEY_KINDS: dict[str, int] = {}  # key -> what _keep makes of it by its name alone: a log names its keys on every line
MAX_KEY_CACHE = 32768


def _key_kind(key: str) -> int:
    lowered = key.lower()
    if lowered in _IGNORED_KEYS or _is_step_key(key) or lowered.endswith((".py", " for step", " at step")) or (
            lowered.startswith(("info", "warning", "debug", "error", "http"))):
        kind = _DROPPED
    else:
        kind = _MODULE if "." in key and _MODULE_PATH.fullmatch(key) else _KEPT
    if len(_KEY_KINDS) >= MAX_KEY_CACHE:
        _KEY_KINDS.clear()
    _KEY_KINDS[key] = kind
    return kind


def parse_text(message: str, wall: float) -> ParsedLine | None:
    """Any non-dict line: key/number pairs (pipe cells when the line is a `|` table) and a step. A table's row
    printed before its header (`all   48   28   0   0`) is not `all = 48`: it is skipped."""
    head = message[:HEAD]
    if _HEADERLESS_ROW.fullmatch(message):
        return None
    parsed = ParsedLine(is_eval=_may_hold(head, _EVAL_LINE_NEEDLES) and _EVAL_LINE.search(head) is not None,
                        wall_time=wall)
    indexed = _INDEXED_KEY.match(message) if "[" in message else None
    if indexed is not None:
        message = indexed.group(1) + message[indexed.end():]
        head = message[:HEAD]
    found: dict[str, float] = {}
    if message.count("|", 0, HEAD) >= 2:
        cells = [c.strip() for c in message.split("|", 128)]
        named = [c for c in cells if c]
        if len(named) == 2 and _ROW_NAME.fullmatch(named[0]) and NUMBER.fullmatch(named[1]):
            found[named[0]] = parse_number(named[1])  # `| policy_loss | 0.0006 |`: a key/value table's row
        for cell in cells:
            for key, value in cell_pairs(cell):
                found.setdefault(key, value)
        candidates = [(k, v, message.find(k) + len(k) + 1) for k, v in found.items()]
    else:
        candidates = find_pairs(message)
        for key, value, _ in candidates:
            found.setdefault(key, value)
    special = ({m["key"]: parse_number(m["value"]) for p in _SPECIAL_PAIRS for m in p.finditer(head)}
               if " reached " in head or "Monitored metric " in head else {})
    parsed.step = int(indexed.group(2)) if indexed is not None else _step_from(head, found)
    if special:  # Lightning callbacks: the rest of the sentence is prose
        found = special
    else:
        keep = {k for k, _, position in candidates if _keep(k, message, position)}
        found = {k: v for k, v in found.items() if k in keep}
    if not found and parsed.step is None:
        return None
    labelled = _LABELLED_FIELDS.match(message)
    if labelled is not None and labelled.group(1).lower() not in _IGNORED_KEYS and not _is_step_key(labelled.group(1)):
        found = {f"{labelled.group(1)}/{k}": v for k, v in found.items()}
    parsed.values = {_with_eval_prefix(k, parsed.is_eval): v for k, v in found.items()}
    return parsed


def _rich_bar(message: str, rich: re.Match[str], wall: float) -> ParsedLine:
    """Lightning's RichProgressBar, `Epoch 2/2  ━━━━ 40/40 0:00:00 • 0:00:00 691.78it/s train_loss: 0.000`
    (epochs from 0, batches within the epoch): step epoch x batches + batch, its metrics after the rate."""
    n, total = int(rich["n"]), int(rich["total"])
    parsed = ParsedLine(kind="bar", step=int(rich["epoch"]) * total + n, bar=(n, total, True), wall_time=wall)
    tail = message[rich.end() :]
    rate = tail.find("it/s")
    start = rate + 4 if rate >= 0 else 0
    if n > 0:
        parsed.values = {k: v for k, v, p in find_pairs(tail, start) if _keep(k, tail, p)}
    return parsed


def _may_hold(text: str, needles: tuple[str, ...]) -> bool:
    """False only where a case-blind regex whose every match holds one of `needles` (lower-case) cannot match."""
    if not text.isascii():
        return True
    lowered = text.lower()
    for needle in needles:
        if needle in lowered:
            return True
    return False


def _is_banner(head: str) -> bool:
    return _may_hold(head, _BANNER_NEEDLES) and _BANNER.search(head) is not None


def parse_line(line: str, message: str | None = None) -> ParsedLine | None:
    """One record (split on \\r and \\n); `message`: strip_headers(line), where the caller has it already."""
    cleaned = clean_line(line)
    message = strip_headers(cleaned) if message is None or cleaned != line else message
    line = cleaned
    if not message:
        return None
    if _is_banner(message[:HEAD]):
        return None  # start-up summaries (parameter counts, model size, FLOPs): not training metrics
    if "━" in message[:HEAD]:
        rich = _RICH_BAR.match(message)
        if rich is not None:
            return _rich_bar(message, rich, wall=0.0)
    wall = parse_timestamp(line) if line[:1] in "[0123456789" or "[titan]" in line[:20] else 0.0
    head = message[:HEAD]
    bar = find_bar(message)
    if bar is not None:
        return _bar_line(message, bar, wall)
    overflow = _OVERFLOW_ITERATION.search(head) if "verflow" in head else None
    if overflow is not None and "scale" not in head:
        return ParsedLine(step=int(overflow.group(1)), kind="overflow", wall_time=wall)  # its scale comes next
    event = _loss_scale_event(head, wall)
    if event is not None:
        return event
    header = _HF_HEADER.match(head) if " = " in head else None
    if header is not None:
        return ParsedLine(kind="hf_header", header={header.group(1): int(header.group(2).replace(",", ""))})
    keras = _KERAS_EPOCH.match(message) if message.startswith("Epoch ") else None
    if keras is not None:
        return ParsedLine(step=int(keras.group(1)), kind="epoch_header", wall_time=wall)
    if "{" in message and "}" in message:
        found = find_dict(message)
        if found is not None:
            return _dict_line(message, found, wall)
    return parse_text(message, wall)


def _bar_line(message: str, bar: re.Match[str], wall: float) -> ParsedLine | None:
    """A tqdm bar: its postfix metrics, Lightning's epoch step, and whatever follows the bar. A bar at 0/N is a
    reset (Lightning redraws each epoch's bar at 0 with the last epoch's postfix): it counts nothing new."""
    description = message[: bar.start()].strip()
    n, total = int(bar.group(2)), int(bar.group(3))
    postfix = bar.group(4) or ""
    parsed = ParsedLine(kind="bar", bar=(n, total, bool(description)), wall_time=wall)
    lightning = re.match(r"(?:Epoch|Validation|Training) ?(\d+)?", description)
    if lightning is not None and lightning.group(1) is not None:
        parsed.step = int(lightning.group(1)) * total + n
    comma = postfix.find(",")
    if comma >= 0 and "=" in postfix and n > 0:
        pairs = [(k, v, p) for k, v, p in find_pairs(postfix, comma) if _keep(k, postfix, p)]
        for key, value, _ in pairs:
            if key.lower().endswith("global_step") and math.isfinite(value):
                parsed.step = int(value)
            else:
                parsed.values.setdefault(key, value)
    rest = message[bar.end() :].strip()
    if rest:
        after = parse_line(rest)
        if after is not None:
            after.bar = parsed.bar
            if not after.kind:  # a logger's line written onto the bar's (no newline between): both are readings
                for key, value in parsed.values.items():
                    after.values.setdefault(key, value)
                if parsed.step is not None:
                    after.step = parsed.step
            return after
    return parsed
