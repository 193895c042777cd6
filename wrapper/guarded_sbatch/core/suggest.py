""""Did you mean" for a mistyped option, key, check or state name."""

from __future__ import annotations

import difflib
import itertools
import os
from collections.abc import Iterable
from pathlib import Path


def closest(word: str, choices: Iterable[str], *, cutoff: float = 0.6) -> str | None:
    """The choice nearest to word, when one is near enough to be the meant one."""
    found = difflib.get_close_matches(word, list(choices), n=1, cutoff=cutoff)
    return found[0] if found else None


def did_you_mean(word: str, choices: Iterable[str], *, prefix: str = "") -> str:
    """`did you mean --nodes? ` (ready to put in front of the rest of a message), or nothing."""
    near = closest(word, choices)
    return f"did you mean {prefix}{near}? " if near else ""


def near_file(path: Path, timeout_s: float = 2.0) -> Path | None:
    """A file beside a missing one whose name is a likely typo's target (`train.sh` for `trian.sh`), looked for in its
    own folder only: listed under a deadline (a hung mount never holds the caller), the first 500 names only."""
    from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415 - a missing path only: off the common path

    with ThreadPoolExecutor(max_workers=1) as pool:
        future = pool.submit(lambda: list(itertools.islice(os.scandir(path.parent), 500)))
        try:
            names = [entry.name for entry in future.result(timeout=timeout_s)]
        except (OSError, TimeoutError):
            return None
    near = closest(path.name, [name for name in names if name != path.name])
    return path.parent / near if near else None
