"""What a configuration key is (`Key`: its path, kind, default, bounds, documentation) and how a value is checked
against it: its kind and bounds, and the one-line error naming what it must be. The keys themselves are declared in
core/config_schema.py.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from guarded_sbatch.core.suggest import did_you_mean

MAX_NUMBER = 1e9  # seconds, counts, sizes: anything larger (1e308, a 400-digit integer) is a typo or an attack


@dataclass(frozen=True)
class Key:
    path: str  # dotted: "sidecar.cpus"
    kind: str  # a kind `checked` knows: str, path, regex, bool, int, float, choice, *_list, names, ...
    default: Any
    doc: str  # the comment above the key in the example site config ("" for none)
    low: float = 0.0  # numbers: low < value <= high (low itself allowed where low_inclusive)
    high: float = MAX_NUMBER
    low_inclusive: bool = False
    choices: tuple[str, ...] = ()  # "choice": one of these; "names": a list of these
    site_only: bool = False  # a user config that sets it is refused (core/config.py)
    nonempty: bool = False  # a string, or every string of a list, must not be blank
    example: Any = None  # the example site config's value, when it is not the default
    note: str = ""  # a short comment after the value in the example
    sample: str = ""  # a value to show in the error for a bad one
    flag: str = ""  # the watcher's command-line flag that sets it for one `monitor` (in seconds; cli/monitor.py)


def checked(key: Key, value: Any, fail: Callable[[str, str], Exception]) -> Any:
    """The value if it fits the key's kind and bounds; else `fail(path, what it must be)` is raised."""
    check = _CHECKS[key.kind]
    if not check(key, value):
        raise fail(key.path, _expected(key))
    if key.kind in ("regex", "regex_list"):
        for pattern in [value] if key.kind == "regex" else value:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise fail(key.path, f"is not a valid regular expression ({pattern!r}: {exc})") from None
    if key.kind == "table":
        for name, item in value.items():
            if isinstance(item, bool) or not isinstance(item, (int, float, str)) or \
                    (isinstance(item, (int, float)) and not abs(item) <= MAX_NUMBER):
                raise fail(f"{key.path}.{name}", f"must be a number (at most {MAX_NUMBER:g}) or a string, "
                                                 f"not a {type(item).__name__}; see docs/judge.md")
    if key.nonempty and any(not item.strip() for item in ([value] if isinstance(value, str) else value)):
        raise fail(key.path, "must not be empty" if isinstance(value, str) else "must be a list of non-empty strings")
    if key.kind == "names":
        for name in value:
            if name not in key.choices:
                raise fail(key.path, f"names an unknown {_WHAT.get(key.path, 'entry')} {name!r}; "
                                     f"{did_you_mean(name, key.choices)}use {', '.join(key.choices)}")
    return value


_WHAT = {"checks.mandatory": "check", "checks.waivable": "check", "notify.on": "event", "enforcement.launchers": "launcher"}


def _number(key: Key, value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (key.kind == "int" and value != int(value)):
        return False
    above = value >= key.low if key.low_inclusive else value > key.low
    return above and value <= key.high


def _strings(key: Key, value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


_CHECKS: dict[str, Callable[[Key, Any], bool]] = {
    "str": lambda key, value: isinstance(value, str),
    "path": lambda key, value: isinstance(value, str),
    "regex": lambda key, value: isinstance(value, str),
    "bool": lambda key, value: isinstance(value, bool),
    "int": _number,
    "float": _number,
    "choice": lambda key, value: value in key.choices,
    "str_list": _strings,
    "path_list": _strings,
    "regex_list": _strings,
    "names": _strings,
    "quiet_hours": _strings,
    "table": lambda key, value: isinstance(value, dict),
}


def _expected(key: Key) -> str:
    if key.kind in ("int", "float"):
        what = "a whole number" if key.kind == "int" else "a number"
        if key.low_inclusive:
            return f"must be {what} from {key.low:g} to {key.high:g}"
        return f"must be {what} greater than {key.low:g}, at most {key.high:g}"
    if key.kind == "choice":
        quoted = [f'"{choice}"' for choice in key.choices]
        return f"must be {', '.join(quoted[:-1])} or {quoted[-1]}"
    return {
        "str": "must be a string",
        "path": f'must be a path in quotes, e.g. {key.path.rsplit(".", 1)[-1]} = "{key.sample or "PATH"}" (or "" for none)',
        "regex": "must be a string (a regular expression)",
        "bool": "must be true or false",
        "names": f"must be a list of names from {', '.join(key.choices)}",
        "quiet_hours": 'must be a list of strings like "22:00-07:00"',
    }.get(key.kind, "must be a list of strings")
