"""The per-user shared monitor's folder: which runs it watches and which job it is.

Layout under <state dir>/shared-monitor/<cluster>/ (the user's own state folder, no daemon):
  lock              flock'ed around every change that must agree with the monitor job's existence
  monitor.json      {"job_id": ..., "submitted_at": ...} while a monitor job exists
  runs/<job>.json   one registration per watched run: its folder (its record says the rest, sidecar/plan.py)
  done/<job>.json   registrations of runs the monitor has finished with
  array-<J>/        the same layout for the watcher of one job array (sidecar/shared_monitor.py), a run per task

A launch writes its registration and, under the lock, submits a monitor job unless one is queued or
running. The monitor retires finished runs and, under the same lock, leaves (and removes
monitor.json) only when no registration is left, so no run is ever left unwatched.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from guarded_sbatch.core import door
from guarded_sbatch.core.fsutil import make_private_dirs, owned_by_me, read_json, state_dir, write_json_atomic


def monitor_folder(cluster: str) -> Path:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in (cluster or "default"))
    return state_dir() / "shared-monitor" / safe


def array_folder(cluster: str, array_job: str) -> Path:
    """The registration folder of one job array's own watcher (one run per task, `J_T`)."""
    safe = "".join(c for c in array_job if c.isdigit() or c == ".") or "_"
    return monitor_folder(cluster) / f"array-{safe}"


def array_of(job_id: str) -> str | None:
    """The array job of a task id `J_T` (on every backend); None for a job that is no array task."""
    job, sep, task = job_id.partition("_")
    return job if sep and job.isdigit() and task.isdigit() else None


@contextmanager
def locked(folder: Path) -> Iterator[None]:
    make_private_dirs(folder)
    with door.lock_file(folder / "lock"):
        yield


def register_run(folder: Path, job_id: str, entry: dict[str, Any]) -> Path:
    path = folder / "runs" / f"{job_id}.json"
    write_json_atomic(path, {**entry, "job_id": job_id, "registered_at": time.time()})
    return path


def registrations(folder: Path, *, known: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """The runs the monitor should watch, oldest registration first: only the user's own registration files (a
    file another user left in the folder never makes the monitor read, run or alert as this user). `known`: job ids
    whose registrations are not read again (an array's watcher lists its 256 every poll)."""
    found = []
    try:
        names = sorted(os.listdir(folder / "runs"))
    except OSError:
        return []
    for name in names:
        if name.endswith(".json") and name[:-5] not in known:
            raw = read_json(folder / "runs" / name, own=True)
            if isinstance(raw, dict) and raw.get("job_id"):
                found.append(raw)
    return sorted(found, key=lambda r: float(r.get("registered_at", 0.0)))


def live_count(folder: Path) -> int:
    try:
        return sum(1 for n in os.listdir(folder / "runs") if n.endswith(".json") and owned_by_me(folder / "runs" / n))
    except OSError:
        return 0


def retire(folder: Path, job_id: str) -> None:
    source = folder / "runs" / f"{job_id}.json"
    target = folder / "done" / f"{job_id}.json"
    make_private_dirs(target.parent)
    try:
        door.rename(source, target)
    except FileNotFoundError:
        pass


def read_monitor(folder: Path) -> dict[str, Any] | None:
    raw = read_json(folder / "monitor.json", own=True)
    return raw if isinstance(raw, dict) and raw.get("job_id") else None


def write_monitor(folder: Path, job_id: str) -> None:
    write_json_atomic(folder / "monitor.json", {"job_id": job_id, "submitted_at": time.time()})


def clear_monitor(folder: Path, job_id: str) -> None:
    current = read_monitor(folder)
    if current is not None and str(current["job_id"]) == str(job_id):
        door.remove(folder / "monitor.json")
