"""Answers that depend only on files that have not changed, remembered in the state folder so a loop of launches
asks once: does this `sbatch` say its version, what can this Python import. An answer is kept with the identity
(device, inode, size, modification time) of each file or folder it depends on, and is given again only while
every one of them is unchanged; anything unreadable is a miss, never an error (the question is asked again)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from guarded_sbatch.core.errors import UsageError
from guarded_sbatch.core.fsutil import read_json, state_dir, update_json

KEPT = 32  # answers kept per kind; the oldest goes first


def identity(path: str) -> list[int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return [info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns]


def recall(kind: str, question: object) -> Any | None:
    """The answer remembered for `question` (JSON-able), while all it depends on is unchanged; else None."""
    try:
        entry = (read_json(_file(kind), own=True) or {}).get(_key(question))
    except (UsageError, AttributeError):
        return None
    if not isinstance(entry, dict) or not isinstance(entry.get("depends"), dict):
        return None
    if any(identity(path) != known for path, known in entry["depends"].items()):
        return None
    return entry.get("answer")


def remember(kind: str, question: object, answer: Any, depends: list[str]) -> None:
    """Keep `answer` for `question`, valid while each path of `depends` keeps its identity."""
    entry = {"answer": answer, "depends": {path: identity(path) for path in depends}, "at": time.time()}

    def add(data: dict[str, Any]) -> None:
        data[_key(question)] = entry
        by_age = sorted(data, key=lambda key: data[key].get("at", 0) if isinstance(data[key], dict) else 0)
        for old in by_age[:-KEPT]:
            data.pop(old, None)

    try:
        update_json(_file(kind), add)
    except (OSError, UsageError):
        pass  # a cache: the next launch asks again


def _file(kind: str) -> Path:
    return state_dir() / "remembered" / f"{kind}.json"


def _key(question: object) -> str:
    return json.dumps(question, sort_keys=True, default=str)
