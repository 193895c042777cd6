"""Pull (step, metric values) out of one cleaned line of a trainer's stdout.

Covers the formats in shared/reference/log-formats.md: HF Trainer dicts, fairseq (json and simple),
DeiT-style JSON lines, Megatron, DeepSpeed, nanoGPT, llm.c (stdout and main.log), modded-nanogpt,
nanochat, torchtitan, timm, the PyTorch ImageNet example, maskrcnn, Composer and OLMo (multi-line),
litgpt, mlx-lm, word_language_model, Lightning's progress bar and callbacks. Rather than one regex per
trainer, a line is read as `key <sep> number` pairs (separators `:`, `=`, spaces), the first number of a
`val (avg)` pair is the current value, and a few per-format rules supply the step.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field

_NUM = r"[-+]?(?:nan|NaN|NAN|-?inf(?:inity)?|Inf(?:inity)?|INF|(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)"
NUMBER = re.compile(_NUM)
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
_WORD = r"[A-Za-z][\w./@\-]*"
_PAIR = re.compile(
    rf"(?<![\w./@\-])(?P<key>{_WORD}(?: {_WORD}){{0,3}})\s*(?:[:=]\s*\[?\s*|\s+)"
    rf"(?:np\.float\d*\(|tensor\()?(?P<value>{_NUM})(?![\d.])"
)
_DICT = re.compile(r"\{[^{}]*\}")
_DICT_PAIR = re.compile(
    rf"""['"](?P<key>[^'"]+)['"]\s*:\s*(?:np\.float\d*\(|tensor\()?['"]?(?P<value>{_NUM})['"]?\s*\)?\s*(?=[,}}])"""
)
_TIMESTAMP = re.compile(r"(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:[,.](\d{1,6}))?")

# Steps computed from epoch and batch: timm, the PyTorch ImageNet example, Lightning's bar, word LM, fairseq.
_EPOCH_BATCH = [
    re.compile(r"\bTrain: (?P<epoch>\d+) \[\s*(?P<batch>\d+)/(?P<total>\d+)"),
    re.compile(r"\bEpoch: \[(?P<epoch>\d+)\]\[\s*(?P<batch>\d+)/(?P<total>\d+)\]"),
    re.compile(r"\bEpoch (?P<epoch>\d+):.*?\|\s*(?P<batch>\d+)/(?P<total>\d+) \["),
    re.compile(r"\| epoch\s+(?P<epoch>\d+) \|\s*(?P<batch>\d+)/\s*(?P<total>\d+) batches"),
    re.compile(r"\bepoch (?P<epoch>\d+):\s+(?P<batch>\d+) / (?P<total>\d+)"),
]
_STEP_KEYS = ["global_step", "global step", "num_updates", "step", "s", "iteration", "iter", "_step", "batch"]
_EVAL_LINE = re.compile(
    r"validation loss at iteration|validate step|\bvalid(?:ation)? on\b|\| valid \||^\s*Test: \[|\bend of epoch\b"
    r"|^\s*Eval ", re.IGNORECASE)
_EVAL_WORDS = re.compile(r"(?:^|[\W_])(eval|val|valid|validation|test|tel)(?:$|[\W_])", re.IGNORECASE)
_IGNORED_KEYS = {"rank", "v_num", "eta", "train", "test", "epoch", "end of epoch", "iteration", "iter",
                 "batch", "validation loss at iteration", "validate step", "global step", "default", "day"}
_LOSS_SCALE_EVENTS = [
    re.compile(rf"reducing to (?P<value>{_NUM})"),
    re.compile(rf"setting loss scale to:?\s*(?P<value>{_NUM})"),
]
_SPECIAL_PAIRS = [
    re.compile(rf"'(?P<key>[\w/.\-]+)' reached (?P<value>{_NUM})"),
    re.compile(rf"Monitored metric (?P<key>[\w/.\-]+) = (?P<value>{_NUM})"),
]
_HF_DICT_MARKERS = {"loss", "eval_loss", "grad_norm", "learning_rate", "train_runtime"}
_EXPLICIT_STEPS = [
    re.compile(r"\bglobal[_ ]step[=: ]\s*(\d+)"),
    re.compile(r"\bat iteration (\d+)"),
    re.compile(r"\bvalidate step:\s*(\d+)"),
]
_MODULE_PATH = re.compile(r"^[a-z_]+(?:\.[a-z_]+)+$")


def parse_number(text: str) -> float:
    lowered = text.lower()
    if "nan" in lowered:
        return math.nan
    if "inf" in lowered:
        return -math.inf if lowered.startswith("-") else math.inf
    return float(text.replace(",", ""))


def clean_line(line: str) -> str:
    return ANSI.sub("", line).replace("\t", "  ").strip()


def parse_timestamp(line: str) -> float:
    match = _TIMESTAMP.search(line)
    if match is None:
        return 0.0
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    fraction = float("0." + match.group(7)) if match.group(7) else 0.0
    try:
        return time.mktime((year, month, day, hour, minute, second, 0, 0, -1)) + fraction
    except (OverflowError, ValueError):
        return 0.0


@dataclass
class ParsedLine:
    values: dict[str, float] = field(default_factory=dict)
    step: int | None = None
    is_eval: bool = False
    ordinal: bool = False  # a dict without a step (HF console): counted by the caller
    wall_time: float = 0.0


def _with_eval_prefix(key: str, is_eval: bool) -> str:
    if is_eval and not _EVAL_WORDS.search(key):
        return "eval/" + key
    return key


def parse_dict_line(line: str) -> ParsedLine | None:
    """HF Trainer / fairseq json / DeiT JSON-lines dicts anywhere in the line."""
    match = _DICT.search(line)
    if match is None or ":" not in match.group(0):
        return None
    pairs = {m["key"]: parse_number(m["value"]) for m in _DICT_PAIR.finditer(match.group(0))}
    if not pairs:
        return None
    parsed = ParsedLine(wall_time=parse_timestamp(line[: match.start()]))
    for step_key in ("step", "global_step", "num_updates", "iteration", "iter", "_step"):
        if step_key in pairs and math.isfinite(pairs[step_key]):
            parsed.step = int(pairs.pop(step_key))
            break
    else:
        epoch = pairs.get("epoch")
        if pairs.keys() & _HF_DICT_MARKERS or epoch is None or not math.isfinite(epoch) or epoch != int(epoch):
            parsed.ordinal = True
        else:
            parsed.step = int(epoch)
    parsed.is_eval = bool(re.search(r"\| valid\b", line[: match.start()]))
    parsed.values = {_with_eval_prefix(k, parsed.is_eval): v for k, v in pairs.items()}
    return parsed


def parse_text_line(line: str) -> ParsedLine | None:
    """Any other trainer line: key/number pairs plus a step from the line (or None: use the last one)."""
    parsed = ParsedLine(is_eval=bool(_EVAL_LINE.search(line)))
    found: dict[str, float] = {}
    for match in _PAIR.finditer(line):
        key = match["key"]
        # A timestamp's date or "[INFO]"-style header words are not metrics.
        if key.endswith(".py") or key.lower().startswith(("info", "warning", "debug", "error")) \
                or (_MODULE_PATH.match(key) and line[match.end() : match.end() + 1] in (",", ":", "]")):
            continue
        found.setdefault(key, parse_number(match["value"]))
    special = {m["key"]: parse_number(m["value"]) for p in _SPECIAL_PAIRS for m in p.finditer(line)}
    if special:  # Lightning callbacks: the rest of the sentence is prose, not metrics
        found = {k: v for k, v in found.items() if k.lower() in _STEP_KEYS} | special
    for pattern in _LOSS_SCALE_EVENTS:
        event = pattern.search(line)
        if event is not None:
            found = {"loss_scale": parse_number(event["value"])}
            break
    lowered = {k.lower(): k for k in found}
    for pattern in _EXPLICIT_STEPS:
        match = pattern.search(line)
        if match is not None:
            parsed.step = int(match.group(1))
            break
    for step_key in _STEP_KEYS:
        original = lowered.get(step_key)
        if original is not None and parsed.step is None and math.isfinite(found[original]):
            parsed.step = int(found[original])
    for pattern in _EPOCH_BATCH:
        match = pattern.search(line) if parsed.step is None else None
        if match is not None:
            parsed.step = int(match["epoch"]) * int(match["total"]) + int(match["batch"])
            break
    for key in list(found):
        if key.lower() in _IGNORED_KEYS or key.lower() in _STEP_KEYS or key.lower().endswith(" iter"):
            del found[key]
    if not found and parsed.step is None:
        return None
    parsed.values = {_with_eval_prefix(k, parsed.is_eval): v for k, v in found.items()}
    parsed.wall_time = parse_timestamp(line)
    return parsed


def parse_line(line: str) -> ParsedLine | None:
    cleaned = clean_line(line)
    if not cleaned or len(cleaned) > 20_000:
        return None
    if "{" in cleaned and "}" in cleaned:
        parsed = parse_dict_line(cleaned)
        if parsed is not None:
            return parsed
    return parse_text_line(cleaned)
