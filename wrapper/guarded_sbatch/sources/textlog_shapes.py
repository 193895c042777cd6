"""The log's own structure, learned as it is read: line templates (Drain-style) and their numeric slots.

A line's message is split on whitespace and every number in it is masked (`loss=0.31` -> `loss=<n>`, `[12/500]` ->
`[<n>/<n>]`, `nan`, `-inf`, `1.#INF` too), so every line a trainer prints with one format string has one masked
shape. Shapes are grouped by token count and their first two masked tokens, and a line joins the group's template it
matches on most tokens (>= 60 %, tokens that differ become `<*>`). A template seen MIN_REPEATS times is a training
line's shape; before that its lines are "rare" (a sample or a dict printed once is never a series).

Each number of a template is a slot, named by the template's own fixed text before it (`key=v`, `key: v`, `key v`,
`[key v]`, a `|` cell, a header printed once over the rows); an unnamed slot is `value` (`value1`, `value2`, ...
when the line has several). A slot is never a series when it is time: a clock or a date, a number with a time unit or
a rate unit after it (`0.31s`, `10.8it/s`, `1320 tok/s`), a name that says time (eta, elapsed, took, ...), epoch
seconds, a count that only falls (an ETA), a `file.py:123` line number, or the total of a `done/total` pair.
The step axis of a template is its slot that only rises, by a steady stride, among the integer slots that are not
time (a name like step/iter/batch/update is preferred, an epoch only when nothing finer rises).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

MIN_REPEATS = 3
SIMILARITY = 0.6
MAX_TOKENS = 64
MAX_TEMPLATES = 2048
MAX_CACHE = 8192
MAX_TOKEN_CHARS = 160  # a longer token (a path, a dump, a row glued with commas) is no slot: it is one fixed word
MAX_SLOTS_PER_TOKEN = 8
LEARN_LINES = 64  # a template's slots are learned over its first lines; after them only its step axis is followed

# a number inside a token: not glued to a letter on its left (`resnet50`, `fp16`, `x86_64`, `mAP50-95` are names)
_NUMBER = re.compile(
    r"(?<![A-Za-z_\d.])(?<![\w.]-)(?:[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?(?:\.#(?:INF|IND|QNAN)\d*)?"
    r"|[-+]?(?:nan|NaN|NAN|inf|Inf|INF|Infinity|infinity)(?![A-Za-z]))"
)
MASK = "<n>"
_WILD = "<*>"
_CLOCK = re.compile(r"\d+:\d\d(?::\d\d)?(?:[.,]\d+)?|\d{4}-\d\d-\d\d|\d\d/\d\d/\d{2,4}")
_TIME_UNIT = re.compile(r"(?:s|sec|secs|second|seconds|ms|us|min|mins|minutes|h|hr|hrs|hours|days?)\b\)?[,;|]?$",
                        re.IGNORECASE)
_RATE_UNIT = re.compile(r"[\w%]*/(?:s|sec|it|iter|step|batch)\b|it/s|s/it", re.IGNORECASE)
_TIME_NAME = re.compile(r"(?:^|[\W_])(?:eta|time|elapsed|took|duration|remaining|left|wall|clock|speed|throughput|"
                        r"timestamp|date|secs?|ms|sec/it|it/s)(?:$|[\W_])", re.IGNORECASE)
_FILE_LINE = re.compile(r"\.\w{1,6}:$|\bline$", re.IGNORECASE)
_GLUED = re.compile(r"[\[({]?[A-Za-z_][\w./]*[^\w\s\-]{1,3}")  # `loss=`, `objective≈`, `acc:` (not `mAP50-`)
_WORD = re.compile(r"[A-Za-z_][\w./@\-()%]*")
_STEP_HINTS = ("step", "steps", "iter", "iters", "iteration", "it", "batch", "update", "updates", "up", "upd",
               "global_step", "n_iter", "niter", "num_updates", "idx", "index", "i", "n", "#")
_EPOCH_HINTS = ("epoch", "ep", "epochs")
_EVAL_WORDS = re.compile(r"(?:^|[\W_])(eval|val|valid|validation|test|dev)(?:$|[\W_])", re.IGNORECASE)


def parse_value(text: str) -> float:
    lowered = text.lower()
    if "nan" in lowered or "#ind" in lowered or "#qnan" in lowered:
        return math.nan
    if "inf" in lowered:
        return -math.inf if lowered.startswith("-") else math.inf
    return float(text)


@dataclass
class Slot:
    """One number position of a template: its name, what it is, and how it has moved so far."""

    name: str | None
    time: bool  # never a series, never the step (clock, duration, rate, ETA, timestamp, file:line, a total)
    timed_name: bool = False  # a name that says time (`eta`, `took`, `data_time`): never the step, no learned series
    total: bool = False  # the total of `done/total`: never the step, never a series
    glued: bool = False  # named inside its own token (`loss=0.3`, `objective≈2.41`)
    count: int = 0
    integer: bool = True
    last: float | None = None
    rises: int = 0
    falls: int = 0
    stride: float | None = None  # the most recent positive difference
    steady: int = 0  # rises by the same stride as the rise before
    distinct: int = 0

    def see(self, value: float, text: str) -> None:
        if self.last is not None and math.isfinite(value) and math.isfinite(self.last):
            diff = value - self.last
            if diff > 0:
                self.rises += 1
                if self.stride is not None and math.isclose(diff, self.stride):
                    self.steady += 1
                self.stride = diff
            elif diff < 0:
                self.falls += 1
            if diff != 0:
                self.distinct += 1
        if not text.lstrip("+-").isdigit():
            self.integer = False  # `3.07e+02`, `12.0`: a reading, not a count
        self.count += 1
        self.last = value

    @property
    def rising(self) -> bool:
        """Rises at every line so far, by a steady stride (an axis): never falls, never holds."""
        return (self.integer and self.falls == 0 and self.count >= 2 and self.rises == self.count - 1
                and self.steady >= (self.rises - 1) // 2 and not self.time and not self.timed_name and not self.total)

    @property
    def countdown(self) -> bool:
        """Only falls (an ETA, iterations left): never a series."""
        return self.integer and self.falls > 0 and self.rises == 0 and self.falls == self.count - 1


@dataclass
class Template:
    tokens: list[str]
    count: int = 0
    slots: dict[tuple[int, int], Slot] = field(default_factory=dict)
    header: list[str] | None = None  # column names printed once above the rows
    is_eval: bool = False
    step_slot: tuple[int, int] | None = None
    held: int = 0  # its first lines with numbers, held until the shape is established
    no_axis: bool = False  # learned and no slot rising: nothing moves its slots any more, it never gets a step axis

    @property
    def established(self) -> bool:
        return self.count >= MIN_REPEATS


@dataclass
class Reading:
    """A line as its template reads it: the step (None: the template has no step axis) and its series."""

    template: Template
    values: dict[str, float]
    step: int | None
    excluded: set[str]  # names of slots that are time (never series)
    step_name: str | None
    time_values: set[float]  # the values of those slots


def _split(message: str) -> list[str]:
    return [t if len(t) <= MAX_TOKEN_CHARS else "<long>" for t in message[:16384].split(None, MAX_TOKENS)[:MAX_TOKENS]]


# token -> (its masked form, its numbers): a log repeats most of its tokens (`'loss':`, `1.0,`, `|`) on every line
_TOKENS: dict[str, tuple[str, tuple[str, ...]]] = {}
MAX_TOKEN_CACHE = 32768


def _token(token: str) -> tuple[str, tuple[str, ...]]:
    entry = _TOKENS.get(token)
    if entry is None:
        if len(_TOKENS) >= MAX_TOKEN_CACHE:
            _TOKENS.clear()
        numbers = tuple(_NUMBER.findall(token)[:MAX_SLOTS_PER_TOKEN]) if token != "<long>" else ()
        entry = _TOKENS[token] = (_NUMBER.sub(MASK, token, MAX_SLOTS_PER_TOKEN) if numbers else token, numbers)
    return entry


def _numbers(token: str) -> tuple[str, ...]:
    return _token(token)[1]


def _slot_name(tokens: list[str], index: int, number_index: int) -> str | None:
    """The fixed text that names the number_index-th number of tokens[index]: text in the token before it
    (`loss=`, `[key`), else up to three fixed words before the token."""
    token = tokens[index]
    parts = token.split(MASK)
    if number_index >= len(parts) - 1:
        return None  # a token that varies (a wildcard): its numbers have no fixed text around them
    before = parts[number_index]
    if number_index > 0 and not re.search(r"[A-Za-z]", before):
        return None  # `<n>/<n>`, `<n>:<n>`: the second number of a pair
    name = re.sub(r"[^\w)%.]+$", "", before.strip("[({|,;:= ").rstrip("/"))  # `objective≈`, `loss=`
    if name and _WORD.fullmatch(name) and not name.endswith(("_", "-")):
        return name
    if before.strip("[({|") and number_index == 0 and before.strip("[({|") not in ("-", "+"):
        return None  # text glued before the number that is no word
    if index >= 2 and tokens[index - 1] in ("|", ":", "=") and _WORD.fullmatch(tokens[index - 2].strip("[(|:=")):
        return tokens[index - 2].strip("[(|:=")  # `| policy_loss | 0.0006 |`: a vertical key/value table's row
    words: list[str] = []
    for previous in reversed(tokens[max(0, index - 3) : index]):
        if MASK in previous or _WILD in previous or previous in ("|", "-", ":", "=", ",", ";", "/"):
            break
        word = previous.strip("[(|").rstrip(":=")
        if not _WORD.fullmatch(word):
            break
        words.append(word)
        if previous.endswith((",", ";", ")")) or previous.startswith(("[", "(", "|")):
            break
    words.reverse()
    # `Train epoch: 0, batch: 3`: the words after the last separator-ended word are the name
    for cut in range(len(words) - 1, 0, -1):
        if words[cut - 1].endswith((",", ";", ":")):
            words = words[cut:]
            break
    return " ".join(w.rstrip(",;:") for w in words) or None


def _slot_is_time(tokens: list[str], index: int, number_index: int, raw_token: str | None, name: str | None) -> bool:
    token = tokens[index]
    parts = token.split(MASK)
    if number_index >= len(parts) - 1:
        return raw_token is not None and _CLOCK.search(raw_token) is not None
    after = parts[number_index + 1] if number_index + 1 < len(parts) else ""
    before = parts[number_index]
    if raw_token is not None and _CLOCK.search(raw_token):
        return True
    if _TIME_UNIT.match(after) or _RATE_UNIT.match(after):
        return True
    pair = not token.replace(MASK, "").strip("[(,;|])").replace("/", "")  # `1320/1445 tok/s`: one unit for both
    if (not after.strip(",;|])") or pair) and index + 1 < len(tokens) and MASK not in tokens[index + 1]:
        following = tokens[index + 1]
        if _TIME_UNIT.fullmatch(following) or _RATE_UNIT.match(following):
            return True
    if _FILE_LINE.search(before) or (number_index == 0 and not before and index > 0 and tokens[index - 1] == "line"):
        return True
    return False


def _slot_is_total(tokens: list[str], index: int, number_index: int) -> bool:
    """The total of `done/total` (`[12/500]`, `Step 5350/50000;`): a bound, not a reading."""
    parts = tokens[index].split(MASK)
    if number_index >= len(parts) - 1:
        return False
    after = parts[number_index + 1] if number_index + 1 < len(parts) else ""
    return number_index > 0 and parts[number_index] == "/" and not re.search(r"[A-Za-z]", after)


def _tokens_similarity(template: list[str], tokens: list[str]) -> float:
    same = sum(1 for a, b in zip(template, tokens) if a == b or a == _WILD)
    return same / len(tokens)


class ShapeLearner:
    """Templates of the lines read so far, and the slots they hold; one per log, kept across reads."""

    def __init__(self) -> None:
        self._groups: dict[tuple[int, str, str], list[Template]] = {}
        self._exact: dict[str, Template] = {}
        self._templates = 0
        self._last_words: list[str] | None = None  # the last line with no number: a header for the next rows
        self._last: tuple[str, list[tuple[tuple[int, int], str]]] | None = None  # the last line's numbers, by slot

    def observe(self, message: str) -> Template | None:
        """The template of one message (a line without its log header), counted; None when no template is kept for
        it (too many templates: the log is not a trainer's repeated lines)."""
        tokens = _split(message)
        if not tokens:
            return None
        cache = _TOKENS
        entries = [cache.get(t) or _token(t) for t in tokens]
        masked_tokens = [entry[0] for entry in entries]
        masked = " ".join(masked_tokens)
        if MASK not in masked:  # (no token holds a space: MASK is in the joined text only where it is in a token)
            self._last_words = re.split(r"[\s,;|]+", message.strip().strip("|").strip())
            return self._no_number_template(masked_tokens)
        template = self._exact.get(masked)
        if template is None:
            template = self._match(masked_tokens)
            if template is None:
                return None
            if len(self._exact) < MAX_CACHE:
                self._exact[masked] = template
        template.count += 1
        self._last = (message, self._see_slots(template, tokens, entries))
        return template

    def _no_number_template(self, masked_tokens: list[str]) -> Template | None:
        return None

    def _match(self, tokens: list[str]) -> Template | None:
        key = (len(tokens), tokens[0] if MASK not in tokens[0] else _WILD,
               tokens[1] if len(tokens) > 1 and MASK not in tokens[1] else _WILD)
        group = self._groups.setdefault(key, [])
        best, best_score = None, 0.0
        for candidate in group:
            score = _tokens_similarity(candidate.tokens, tokens)
            if score > best_score:
                best, best_score = candidate, score
        if best is not None and best_score >= SIMILARITY:
            for i, (a, b) in enumerate(zip(best.tokens, tokens)):
                if a != b and a != _WILD:
                    best.tokens[i] = _WILD
            return best
        if self._templates >= MAX_TEMPLATES:
            return None
        self._templates += 1
        template = Template(list(tokens), is_eval=any(_EVAL_WORDS.search(t) for t in tokens if MASK not in t))
        slots_count = sum(t.count(MASK) for t in tokens)
        if self._last_words and len(self._last_words) == slots_count and all(_WORD.fullmatch(w) for w in self._last_words):
            template.header = list(self._last_words)
        group.append(template)
        return template

    def _see_slots(self, template: Template, raw: list[str],
                   entries: list[tuple[str, tuple[str, ...]]]) -> list[tuple[tuple[int, int], str]]:
        order = 0
        found: list[tuple[tuple[int, int], str]] = []
        learning = template.count <= LEARN_LINES
        for index, (_, numbers) in enumerate(entries):
            for number_index, text in enumerate(numbers):  # (a token with numbers is masked; one without has none)
                found.append(((index, number_index), text))
                slot = template.slots.get((index, number_index))
                if slot is None:
                    name = self._name(template, index, number_index, order)
                    time = _slot_is_time(template.tokens, index, number_index, raw[index], name)
                    slot = template.slots[(index, number_index)] = Slot(
                        name, time, bool(name and _TIME_NAME.search(name)), _slot_is_total(template.tokens, index, number_index),
                        number_index == 0 and MASK in template.tokens[index]
                        and _GLUED.fullmatch(template.tokens[index].split(MASK)[0]) is not None)
                if learning or (index, number_index) == template.step_slot:
                    try:
                        slot.see(parse_value(text), text)
                    except ValueError:
                        pass
                order += 1
        if template.step_slot is not None and not template.slots[template.step_slot].rising:
            template.step_slot = None  # it stopped rising: it was no axis
        if template.step_slot is None and template.count >= MIN_REPEATS and not template.no_axis:
            template.step_slot = _choose_step(template)
            # past its learning lines only the step slot's values are seen: with none, its slots stay as they are
            template.no_axis = template.step_slot is None and not learning
        return found

    @staticmethod
    def _name(template: Template, index: int, number_index: int, order: int) -> str | None:
        if template.header is not None and order < len(template.header):
            return template.header[order]
        return _slot_name(template.tokens, index, number_index)

    def _slot_values(self, template: Template, message: str) -> list[tuple[tuple[int, int], Slot, float]]:
        if self._last is not None and self._last[0] == message:
            found = self._last[1]
        else:
            found = [((index, number_index), text) for index, token in enumerate(_split(message))
                     for number_index, text in enumerate(_numbers(token))]
        out = []
        for key, text in found:
            slot = template.slots.get(key)
            if slot is not None:
                try:
                    out.append((key, slot, parse_value(text)))
                except ValueError:
                    continue
        return out

    def read(self, template: Template, message: str) -> Reading:
        """The template's reading of one of its lines: step slot, series values (unnamed ones `value`/`value<k>`)."""
        reading = Reading(template, {}, None, set(), None, set())
        unnamed: list[float] = []
        for key, slot, value in self._slot_values(template, message):
            if key == template.step_slot and math.isfinite(value):
                reading.step, reading.step_name = int(value), slot.name
            elif slot.time or slot.countdown or _epoch_seconds(slot, value):
                if slot.name:
                    reading.excluded.add(slot.name)
                reading.time_values.add(value)
            elif slot.timed_name or slot.total:
                continue  # the known formats keep a named `time: 0.23` as they always did; no learned series
            elif slot.name is None:
                if slot.distinct > 0 or not math.isfinite(value):
                    unnamed.append(value)
            else:
                reading.values.setdefault(slot.name, value)
        for k, value in enumerate(unnamed, start=1):
            reading.values.setdefault("value" if len(unnamed) == 1 else f"value{k}", value)
        if template.is_eval:
            reading.values = {k if _EVAL_WORDS.search(k) else f"eval/{k}": v for k, v in reading.values.items()}
        return reading


def _epoch_seconds(slot: Slot, value: float) -> bool:
    return slot.integer and 1e9 <= value < 1e11 and slot.rises > 0


def _hint(name: str | None, hints: tuple[str, ...]) -> bool:
    if not name:
        return False
    words = re.split(r"[\s/_.:]+", name.lower().strip(".#"))
    return any(w in hints for w in words if w) or name.lower().strip(". ") in hints


def _choose_step(template: Template) -> tuple[int, int] | None:
    """The step axis: the rising slot named like a step, else the first unnamed rising slot, else any rising slot
    but an epoch (the smallest stride), else a rising epoch."""
    rising = [(key, slot) for key, slot in sorted(template.slots.items()) if slot.rising]
    if not rising:
        return None
    for key, slot in rising:
        if _hint(slot.name, _STEP_HINTS):
            return key
    plain = [(key, slot) for key, slot in rising if not _hint(slot.name, _EPOCH_HINTS)]
    for key, slot in plain:
        if slot.name is None:
            return key
    if plain:
        return min(plain, key=lambda item: item[1].stride or math.inf)[0]
    return rising[0][0]
