"""File-system facts for the pre-flight: stats that cannot hang the login node (the mount table is core/mounts.py).

A stat on a hung NFS mount blocks in the kernel and cannot be interrupted; it runs in a daemon thread with a
deadline, so the caller moves on (the thread is abandoned and dies with the process).
"""

from __future__ import annotations

import os
import queue
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
import time

from guarded_sbatch.core import door

@dataclass(frozen=True)
class StatOutcome:
    path: Path
    exists: bool
    is_dir: bool = False
    timed_out: bool = False
    error: str = ""  # permission denied, ...
    resolved: Path | None = None  # the real path (symlinks followed) when it could be found in time
    empty: bool = False  # a folder with nothing in it (looked at only when asked: look_inside=True)
    special: str = ""  # what it is when neither a regular file nor a folder ("a FIFO", "a device", "a socket")


def timed_stat(
    path: Path, timeout_s: float, *, stat_function: Callable[[Path], os.stat_result] | None = None
) -> StatOutcome:
    """Stat `path` with a deadline; a hung mount gives timed_out=True instead of hanging the caller."""
    return timed_stats([path], timeout_s, stat_function=stat_function)[0]


def timed_stats(
    paths: list[Path], timeout_s: float, *, stat_function: Callable[[Path], os.stat_result] | None = None,
    look_inside: bool = False,
) -> list[StatOutcome]:
    """Stat several paths in parallel threads, all under one deadline; `look_inside`: whether a folder is empty."""
    do_stat = stat_function or (lambda p: os.stat(p))
    answers: queue.Queue[tuple[int, StatOutcome]] = queue.Queue()

    def work(index: int, path: Path) -> None:
        try:
            result = do_stat(path)
            resolved: Path | None = None
            try:
                resolved = Path(os.path.realpath(path))
            except OSError:
                resolved = None
            is_dir = stat.S_ISDIR(result.st_mode)
            special = "" if is_dir or stat.S_ISREG(result.st_mode) else door.kind_of(result.st_mode)
            answers.put((index, StatOutcome(path, True, is_dir, resolved=resolved,
                                            empty=look_inside and is_dir and _is_empty(path), special=special)))
        except FileNotFoundError:
            answers.put((index, StatOutcome(path, False)))
        except NotADirectoryError:
            answers.put((index, StatOutcome(path, False, error="a parent is not a folder")))
        except OSError as exc:
            answers.put((index, StatOutcome(path, False, error=exc.strerror or str(exc))))

    for index, path in enumerate(paths):
        threading.Thread(target=work, args=(index, path), daemon=True, name=f"stat-{index}").start()
    outcomes: dict[int, StatOutcome] = {}
    deadline = _now() + timeout_s
    while len(outcomes) < len(paths):
        remaining = deadline - _now()
        if remaining <= 0:
            break
        try:
            index, outcome = answers.get(timeout=remaining)
        except queue.Empty:
            break
        outcomes[index] = outcome
    return [outcomes.get(i, StatOutcome(p, False, timed_out=True)) for i, p in enumerate(paths)]


def _is_empty(folder: Path) -> bool:
    try:
        with os.scandir(folder) as entries:
            return next(entries, None) is None
    except OSError:
        return False


def _now() -> float:

    return time.monotonic()
