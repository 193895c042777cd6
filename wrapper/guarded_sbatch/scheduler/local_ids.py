"""Local job ids: one sequence per user on this machine, never restarted by a fresh state folder.

The counter lives in the user's own state home (not in the state folder a run or a test points
GUARDED_SBATCH_STATE_DIR at), and each state folder keeps its last id as well: the next id is past both
and past every job folder there. An id whose output file already exists (an older run's `slurm-<id>.out`,
or a name a co-worker planted in a shared folder) is skipped, never written over.
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Callable
from pathlib import Path

from guarded_sbatch.core import door
from guarded_sbatch.core.errors import NothingSubmittedError, SchedulerError
from guarded_sbatch.core.fsutil import make_private_dirs

COUNTER = "counter"
SKIP_TRIES = 64  # ids whose output files exist, skipped before the submission is refused


def user_counter_path() -> Path:
    """The per-user counter: under the account's own home (from the password database, so a test or a job
    that moves $HOME still counts on), or $XDG_STATE_HOME."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(pwd.getpwuid(os.geteuid()).pw_dir, ".local", "state")
    return Path(base) / "guarded-sbatch" / "local-job-ids"


def _bump(path: Path, floor: int, count: int) -> int | None:
    """Under the file's lock: the first of `count` ids past both its value and floor, stored; None when the
    file cannot be used (no writable home)."""
    try:
        make_private_dirs(path.parent)
        with door.lock_file(path) as fd:  # the counter is its own lock file (a lock held too long: None)
            if not os.path.samestat(os.fstat(fd), os.lstat(path)):
                return None  # replaced while we waited
            text = os.pread(fd, 32, 0).decode("utf-8", "replace").strip()
            first = max(int(text) if text.isdigit() else 0, floor) + 1
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(first + count - 1).encode(), 0)
    except OSError:
        return None
    return first


def _highest_folder(root: Path) -> int:
    try:
        return max((int(name) for name in os.listdir(root) if name.isdigit()), default=0)
    except OSError:
        return 0


def _read(path: Path) -> int:
    try:
        text = door.read(path, 64, head=True).text().strip()
    except OSError:
        return 0
    return int(text) if text.isdigit() else 0


def peek_next_id(root: Path) -> int:
    """The id the next job would get (for `--test-only`), without taking it."""
    return max(_highest_folder(root), _read(root / COUNTER), _read(user_counter_path())) + 1


def take_ids(root: Path, count: int) -> int:
    """The first of `count` consecutive fresh ids: from the user's counter, past this state folder's."""
    make_private_dirs(root)
    floor = max(_highest_folder(root), _read(root / COUNTER))
    first = _bump(user_counter_path(), floor, count)
    if first is None:  # no usable home: this folder's counter alone
        first = _bump(root / COUNTER, floor, count)
        if first is None:
            raise SchedulerError(f"cannot take a job id: neither {user_counter_path()} nor {root / COUNTER} "
                                 "can be written")
        return first
    _bump(root / COUNTER, first - 1, count)  # this folder's own record, the floor if the user's is lost
    return first


def take_free_ids(root: Path, count: int, collides: Callable[[int], str | None]) -> int:
    """Fresh ids whose outputs name no existing file; `collides(first)` says which file an id block would
    write over. After SKIP_TRIES blocks, refused with that name."""
    clash = None
    for _ in range(SKIP_TRIES):
        first = take_ids(root, count)
        clash = collides(first)
        if clash is None:
            return first
    raise NothingSubmittedError(f"every job id tried would write over an existing file (last: {clash}; another "
                                "user's file in a shared folder?); nothing was submitted: move the old output files "
                                "away or name the output with --output")
