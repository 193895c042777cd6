"""sbatch 22.05's value grammars for the options the pre-flight reads, exactly as its C code reads them.

Time limits: src/common/parse_time.c (time_str2mins); whole numbers: parse_int in src/common/proc_args.c
(strtol); node counts: verify_node_count (proc_args.c). Where sbatch would overflow a C int and carry on with a
wrapped value, these refuse the value with one line instead (the differential test documents each such case).
"""

from __future__ import annotations

import re

from guarded_sbatch.core.errors import UsageError

TIME_FORMATS = "minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS, 0 or UNLIMITED (no limit)"
INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1
_C_SPACE = " \t\n\v\f\r"
_STRTOL = re.compile(r"([+-]?)([0-9]+)")  # after leading C whitespace; ASCII digits only, as strtol reads them
_DIGITS = frozenset("0123456789")


def shown(text: str) -> str:
    """A value for a message: quoted, and cut when it is long (a 5000-digit number stays one short line)."""
    return repr(text) if len(text) <= 40 else repr(text[:30]) + f"… ({len(text)} characters)"


def parse_time_limit(text: str, *, where: str = "--time") -> int | None:
    """sbatch's --time value to the limit Slurm stores, in seconds (whole minutes, rounded up); None = no limit.

    Accepts what sbatch accepts: `0`, `-1`, `UNLIMITED`, `INFINITE` (no limit), `M`, `M:S`, `H:M:S`, `D-H`,
    `D-H:M`, `D-H:M:S` and `D-` (D days). Raises UsageError for anything else, and for limits that overflow
    Slurm's arithmetic (sbatch would store a wrapped value) or are negative (`-5`: ditto).
    """
    if text.lower() in ("-1", "infinite", "unlimited"):
        return None
    if not _valid_timespec(text):
        raise UsageError(f"time limit {shown(text)} ({where}) is not a Slurm time: use {TIME_FORMATS}")
    days = hours = minutes = seconds = 0
    if "-" in text:
        day_text, _, clock = text.partition("-")
        days = _time_part(day_text, text, where) if day_text else -_time_part(clock, text, where)
        if day_text and clock:
            parts = [_time_part(p, text, where) for p in clock.split(":")]
            hours, minutes, seconds = (parts + [0, 0])[:3]
    else:
        parts = [_time_part(p, text, where) for p in text.split(":")]
        if len(parts) == 3:
            hours, minutes, seconds = parts
        else:
            minutes, seconds = (parts + [0])[:2]
    products = (days * 86400, hours * 3600, minutes * 60)
    total = sum(products) + seconds
    if any(abs(p) > INT_MAX for p in products) or total + 59 > INT_MAX:
        raise UsageError(
            f"time limit {shown(text)} ({where}) is too large for Slurm (it would wrap around); "
            "use UNLIMITED for no limit, or a limit under 68 years"
        )
    if total < 0:
        raise UsageError(f"time limit {shown(text)} ({where}) is negative; use UNLIMITED (or 0) for no limit")
    if total == 0:
        return None
    return (total + 59) // 60 * 60


def _valid_timespec(text: str) -> bool:
    """parse_time.c _is_valid_timespec: digits, at most one '-' (before any ':') and two ':', enough numbers."""
    runs = dashes = colons = 0
    in_digits = False
    for char in text:
        if char in _DIGITS:
            if not in_digits:
                runs += 1
                in_digits = True
        elif char == "-":
            in_digits = False
            dashes += 1
            if colons:
                return False
        elif char == ":":
            in_digits = False
            colons += 1
        else:
            return False
    if not runs or dashes > 1 or colons > 2:
        return False
    needed = {1: 3, 2: 4} if dashes else {1: 2, 2: 3}
    return runs >= needed.get(colons, 0)


def _time_part(part: str, text: str, where: str) -> int:
    if len(part) > 12 or int(part) > INT_MAX:  # sscanf("%d") would overflow
        raise UsageError(
            f"time limit {shown(text)} ({where}) is too large for Slurm (it would wrap around); "
            "use UNLIMITED for no limit, or a limit under 68 years"
        )
    return int(part)


def strtol_prefix(text: str) -> tuple[int | None, str]:
    """C strtol(text, &end, 10): the number (None when no digits) and the text left after it."""
    body = text.lstrip(_C_SPACE)
    match = _STRTOL.match(body)
    if not match:
        return None, text
    digits = match.group(2).lstrip("0") or "0"
    value = LONG_MAX if len(digits) > 19 else int(digits)
    value = min(value, LONG_MAX)
    return (-value if match.group(1) == "-" else value), body[match.end() :]


def parse_positive_int(text: str, option: str, *, where: str) -> int:
    """parse_int(option, text, positive=true): a whole number > 0, nothing after it."""
    value, rest = strtol_prefix(text)
    if value is None or rest or value <= 0:
        raise UsageError(f"--{option}={shown(text)} ({where}) is not a whole number > 0; sbatch refuses it too")
    if value > INT_MAX:
        raise UsageError(f"--{option}={shown(text)} ({where}) is too large; Slurm keeps it in a C int (at most {INT_MAX})")
    return value


def parse_node_count(text: str, *, where: str) -> tuple[int, int]:
    """verify_node_count: `N`, `MIN-MAX` (either side may carry a k/K or m/M multiplier); (min, max)."""
    if "-" in text:
        low_text, _, high_text = text.partition("-")
        low = _node_number(low_text, text, where, allow_empty=True)
        low = 1 if low < 0 else low
        high = _node_number(high_text, text, where, allow_empty=True)
    else:
        low = high = _node_number(text, text, where, allow_empty=False)
        if low < 0:
            raise _bad_nodes(text, where)
    if high != 0 and high < low:
        raise UsageError(f"--nodes={shown(text)} ({where}): the maximum node count is below the minimum; write MIN-MAX")
    if low < 0 or high < 0:
        raise _bad_nodes(text, where)
    return low, high


def _node_number(part: str, text: str, where: str, *, allow_empty: bool) -> int:
    value, rest = strtol_prefix(part)
    if value is None:
        if allow_empty and not part.strip(_C_SPACE):
            return -1
        raise _bad_nodes(text, where)
    if rest[:1] in ("k", "K"):
        value, rest = value * 1024, rest[1:]
    if rest[:1] in ("m", "M"):
        value, rest = value * 1024 * 1024, rest[1:]
    if rest.strip(_C_SPACE):
        raise _bad_nodes(text, where)
    if abs(value) > INT_MAX:
        raise UsageError(f"--nodes={shown(text)} ({where}) is too large; Slurm keeps node counts in a C int")
    return value


def _bad_nodes(text: str, where: str) -> UsageError:
    return UsageError(f"--nodes={shown(text)} ({where}) is not a valid node count; write N or MIN-MAX (e.g. 2 or 2-4)")
