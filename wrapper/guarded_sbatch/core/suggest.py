""""Did you mean" for a mistyped option, key, check or state name."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def closest(word: str, choices: Iterable[str], *, cutoff: float = 0.6) -> str | None:
    """The choice nearest to word, when one is near enough to be the meant one."""
    found = difflib.get_close_matches(word, list(choices), n=1, cutoff=cutoff)
    return found[0] if found else None


def did_you_mean(word: str, choices: Iterable[str], *, prefix: str = "") -> str:
    """`did you mean --nodes? ` (ready to put in front of the rest of a message), or nothing."""
    near = closest(word, choices)
    return f"did you mean {prefix}{near}? " if near else ""
