"""The tokenizer under the text-log reader: numbers (non-finite ones included), `key value`,
`key=value`, `key: value` pairs anywhere on a line, quoted dicts, pipe-separated cells.

Linear time per byte: every regex here either starts on a character class that fails at once on
ordinary text, or is bounded, and the Python work runs once per number found (capped per line), so
a megabyte of spaces, of `a=` or of any other junk costs one scan in C. The key of a number is read
backwards from the number over a bounded window, never by a regex that could backtrack over the line.
"""

from __future__ import annotations

import math
import re
import time

MAX_NUMBERS_PER_LINE = 1000  # a metric line has tens; more is a printed tensor or a dump
KEY_WINDOW = 96  # how far left of a number its key may start
MAX_KEY_WORDS = 4

# PaddleOCR pads a NaN with x's (`loss: nanxxx`)
_NONFINITE = r"[-+]?(?>nan|NaN|NAN|Infinity|infinity|INFINITY|inf|Inf|INF)(?:x{1,8}+)?(?![\w])"
_FINITE = (
    r"[-+]?(?>\d{1,3}(?:,\d{3}){1,8}+(?!\d)(?:\.\d{1,40}+)?|\d{1,40}+(?:\.\d{0,40}+)?|\.\d{1,40}+)"
    r"(?:[eE][-+]?\d{1,4}+)?(?![\d.]\d)(?!\.\d)(?!\d)"
)
NUMBER = re.compile(rf"(?<![\w.\-+@])(?:{_NONFINITE}|{_FINITE})")
# Where a number may start: one character class first, so the regex engine scans for it in C.
_NUMBER_START = re.compile(r"[-+0-9.nNiI](?<![\w.+\-@].)")
MAX_CANDIDATES_PER_LINE = 4 * MAX_NUMBERS_PER_LINE
HEAD = 1024  # markers (step fields, eval words, events) are looked for in a line's first characters
ANSI = re.compile(r"\x1b\[[0-9;?]{0,32}[A-Za-z]|\x1b\][^\x07\x1b]{0,256}(?:\x07|\x1b\\)")
_WORD = re.compile(r"[A-Za-z_][\w./@\-]*+(?:\([\w/%]{1,16}\))?")
_BRACKETED = re.compile(r"\[([A-Za-z_][\w./@\-]{0,63})\]")  # `[Loss] 1.23 | [step] 89`: a key in brackets
_ATTACHED_KEY = re.compile(r"(?<=[=,(\[{|;/])[A-Za-z_][\w.@\-]{1,63}$")
_NONFINITE_WORD = re.compile(r"[-+]?(?:nan|inf|infinity)", re.IGNORECASE)
_NONFINITE_CHARS = len("+infinity")  # the longest text _NONFINITE_WORD matches whole
_OPENER = re.compile(r"(?:np\.float\d{0,3}|tensor|float|Decimal)?\($|\[$")
_TIMESTAMP = re.compile(r"(\d{4})-(\d{2})-(\d{2})[ T_](\d{2}):(\d{2}):(\d{2})(?:[,.](\d{1,9}))?")
# Log headers before the message: timestamps, ranks, logger names, levels, file:line tags.
_HEADER = re.compile(
    r"\s*+(?:"
    r"\[?\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[,.]\d{1,9})?(?:[+-]\d{2}:?\d{2}|Z)?\]?:?"
    r"|\[?\d{2}/\d{2}(?:/\d{2,4})? \d{2}:\d{2}:\d{2}(?:[,.]\d{1,9})?(?: [\w.]{1,64})?\]?:?"
    r"|\[(?:rank ?\d{1,6}|Rank \d{1,6}|RANK \d{1,6}|default\d{1,6}|titan|INFO|WARNING|DEBUG|ERROR|CRITICAL"
    r"|deepspeed|\d{1,6},\d{1,6}\]<std(?:out|err)>|[\w.]{1,64}\.py:\d{1,6}(?::\w{1,64})?|\w{1,32}:\d{1,6})\]:?"
    r"|\d{1,6},\d{1,6}\]<std(?:out|err)>:"
    r"|-\s(?:[\w.]{1,64}\s-\s)?(?:INFO|WARNING|DEBUG|ERROR|CRITICAL)\s{1,8}-"
    r"|(?:INFO|WARNING|DEBUG|ERROR|CRITICAL)(?::[\w.]{1,64}:|\s{1,8}(?=\[))"
    r"|[\w.]{1,64}\s-\s(?:INFO|WARNING|DEBUG|ERROR|CRITICAL)\s-"
    r"|\d{1,4}:(?=\s)"
    r")"
)
_RANK_ONLY = re.compile(r"\s*+\[(?:rank ?\d{1,6}|default\d{1,6})\]: ?")
_BAR = re.compile(r"(?:(?<=\s)|^)(\d{1,3})%\|[^|\n]{0,200}\|\s{0,8}(\d{1,12})/(\d{1,12})\s{0,4}\[([^\]]{0,400})\]?")
_QUOTED_PAIR = re.compile(
    r"""(['"])(?P<key>[^'"\n]{1,120}?)\1\s{0,8}:\s{0,8}(?:np\.float\d{0,3}\(|tensor\()?['"]?"""
    rf"""(?P<value>{_NONFINITE}|{_FINITE})['"]?\s{{0,8}}\)?\s{{0,8}}(?=[,}}])"""
)
_DICT = re.compile(r"\{[^{}]*+\}")


def parse_number(text: str) -> float:
    """A number token as printed (thousands separators, nan/inf/Infinity in any case) -> float."""
    if "," not in text and text[-1:].isdigit():
        try:
            return float(text)  # what float takes and ends in a digit is a finite number: no nan, no inf in it
        except ValueError:
            pass
    lowered = text.lower()
    if "nan" in lowered:
        return math.nan
    if "inf" in lowered:
        return -math.inf if lowered.startswith("-") else math.inf
    return float(text.replace(",", ""))


def clean_line(line: str) -> str:
    """Colours and backspaces (Keras' dynamic display) removed, tabs made spaces."""
    if "\x1b" in line:
        line = ANSI.sub("", line)
    if "\x08" in line:
        line = line.replace("\x08", "")
    return line.replace("\t", "  ")


def strip_headers(line: str) -> str:
    """The message of a log record: leading timestamps, rank tags, logger names and levels removed."""
    position = 0
    for _ in range(8):
        match = _HEADER.match(line, position)
        if match is None or match.end() == position:
            break
        position = match.end()
    return line[position:].strip()


def strip_rank_prefix(line: str) -> str:
    """`[rank0]:   File ...` -> `   File ...` (indentation kept: tracebacks need it)."""
    match = _RANK_ONLY.match(line)
    return line[match.end() :] if match else line


def parse_timestamp(line: str) -> float:
    match = _TIMESTAMP.search(line, 0, 200)
    if match is None:
        return 0.0
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    fraction = float("0." + match.group(7)) if match.group(7) else 0.0
    try:
        return time.mktime((year, month, day, hour, minute, second, 0, 0, -1)) + fraction
    except (OverflowError, ValueError):
        return 0.0


def find_bar(line: str) -> re.Match[str] | None:
    """A tqdm bar (`42%|████ | 40/95 [00:03<01:37, 10.84it/s, loss=2.3]`); None when there is none."""
    position = line.find("%|")
    for _ in range(4):
        if position < 0:
            return None
        match = _BAR.search(line, max(0, position - 4), position + 1024)
        if match is not None:
            return match
        position = line.find("%|", position + 2)
    return None


def _key_before(text: str, end: int, lower_bound: int) -> str | None:
    """The key that names the number starting at `end`: up to 4 words, then an optional `:`/`=`."""
    start = max(lower_bound, end - KEY_WINDOW)
    before = text[start:end].rstrip()
    opener = _OPENER.search(before[-16:]) if before.endswith(("(", "[")) else None
    if opener is not None:
        before = before[: len(before) - (len(before[-16:]) - opener.start())].rstrip()
    if before.endswith((":", "=")):
        before = before[:-1].rstrip()
    elif before.endswith("-") and not before.endswith("--"):
        return None  # `1:39:15-2` style ranges
    if not before:
        return None
    words = before.rsplit(" ", MAX_KEY_WORDS)
    if start > lower_bound and len(words) <= MAX_KEY_WORDS:
        words = words[1:]  # the first one may be cut by the window
    key = _key_of_words(words)
    return key if key is not None else _quoted_key(before)


def _key_of_words(words: list[str]) -> str | None:
    """The key in the last words before a number: up to MAX_KEY_WORDS plain words, or a key attached to the
    last word (`epoch=0/micro_step=40`); None when the last word is neither."""
    key_words: list[str] = []
    if words and words[-1].startswith("[") and (bracketed := _BRACKETED.fullmatch(words[-1])) is not None:
        return bracketed.group(1)
    for word in reversed(words):
        plain = _PLAIN_WORDS.get(word)
        if plain is None:
            plain = _plain_word(word)
        if not plain:
            if not key_words and word:
                attached = _ATTACHED_KEY.search(word)  # `epoch=0/micro_step=40`, `[step=190`
                if attached is not None and not (len(attached.group()) <= _NONFINITE_CHARS
                                                 and _NONFINITE_WORD.fullmatch(attached.group())):
                    return attached.group()
            break
        key_words.append(word)
        if len(key_words) == MAX_KEY_WORDS:
            break
    return " ".join(reversed(key_words)) if key_words else None


# word -> whether it can be part of a key (a word, not a nan/inf): keys repeat on every line of a log
_PLAIN_WORDS: dict[str, bool] = {}
MAX_WORD_CACHE = 32768


def _plain_word(word: str) -> bool:
    plain = bool(word) and _WORD.fullmatch(word) is not None and not (
        len(word) <= _NONFINITE_CHARS and _NONFINITE_WORD.fullmatch(word))
    if len(_PLAIN_WORDS) >= MAX_WORD_CACHE:
        _PLAIN_WORDS.clear()
    _PLAIN_WORDS[word] = plain
    return plain


def _quoted_key(before: str) -> str | None:
    """`'loss': 2.3` with a key the words did not take: the quoted text just before."""
    if before[-1] in ("'", '"'):
        opening = before.rfind(before[-1], 0, len(before) - 1)
        if opening >= 0 and len(before) - opening < 80:
            return before[opening + 1 : -1] or None
    return None


def numbers_in(text: str, start: int = 0, end: int | None = None) -> list[re.Match[str]]:
    """The number tokens of text[start:end], at most MAX_NUMBERS_PER_LINE of them."""
    end = len(text) if end is None else end
    found: list[re.Match[str]] = []
    for count, candidate in enumerate(_NUMBER_START.finditer(text, start, end)):
        if count >= MAX_CANDIDATES_PER_LINE or len(found) >= MAX_NUMBERS_PER_LINE:
            break
        match = NUMBER.match(text, candidate.start(), end)
        if match is not None:
            found.append(match)
    return found


def find_pairs(text: str, lower_bound: int = 0, upper_bound: int | None = None) -> list[tuple[str, float, int]]:
    """Every `key <sep> number` in text[lower_bound:upper_bound] as (key, value, start of the number).

    A number with no key is skipped; the first of `val (avg)` is the one kept (the average has no key).
    """
    found: list[tuple[str, float, int]] = []
    end = len(text) if upper_bound is None else upper_bound
    for match in numbers_in(text, lower_bound, end):
        if text[match.end() : match.end() + 1] == ":" and text[match.end() + 1 : match.end() + 2].isdigit():
            continue  # a clock time (`eta: 0:39:15`)
        key = _key_before(text, match.start(), lower_bound)
        if key is not None:
            found.append((key, parse_number(match.group()), match.start()))
    return found


def find_dict(text: str) -> tuple[dict[str, float], int, int] | None:
    """The first `{...}` with quoted keys and numeric (or numeric-string) values, and its span."""
    if "{" not in text:
        return None
    for count, match in enumerate(_DICT.finditer(text)):
        if count >= 16:
            break
        body = match.group()
        if ":" not in body:
            continue
        pairs = {key: parse_number(value) for _, key, value in _QUOTED_PAIR.findall(body)}  # (quote, key, value)
        if pairs:
            return pairs, match.start(), match.end()
    return None


def cell_pairs(cell: str) -> list[tuple[str, float]]:
    """One `|`-separated cell: `lm loss: 2.1E+00`, `elapsed time per iteration (ms): 270.4`,
    `loss   nan`, `12.34 ms` (value first: the unit is the key), or several `k=v` pairs."""
    numbers = [m for m in numbers_in(cell)
               if not (cell[m.end() : m.end() + 1] == ":" and cell[m.end() + 1 : m.end() + 2].isdigit())]
    if not numbers:
        return []
    key, colon, value = cell.rpartition(":")
    after = [m for m in numbers if m.start() > len(key)]
    if colon and len(after) == 1 and not cell[len(key) + 1 : after[0].start()].strip():
        name = " ".join(key.split())
        if name and len(name) <= 64 and name[0].isalpha():
            return [(name, parse_number(after[0].group()))]  # `number of nan iterations:   0`
    first = numbers[0]
    head = " ".join(cell[: first.start()].split()).rstrip(":= ").strip()
    pairs: list[tuple[str, float]] = []
    if (bracketed := _BRACKETED.fullmatch(head)) is not None:
        head = bracketed.group(1)
    if head and len(head) <= 64 and not head.endswith((",", "(", "/")) and head[0].isalpha():
        pairs.append((head, parse_number(first.group())))
    elif not head:
        tail = cell[first.end() :].split()
        unit = tail[0] if tail else ""
        if len(numbers) == 1 and unit and _WORD.fullmatch(unit) and not _NONFINITE_WORD.fullmatch(unit):
            pairs.append((unit, parse_number(first.group())))
    if len(numbers) > 1:
        pairs.extend((k, v) for k, v, _ in find_pairs(cell, first.end()))
    return pairs
