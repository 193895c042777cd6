"""The per-user shared monitor's folder: which runs it watches and which job it is.

Layout under <state dir>/shared-monitor/<cluster>/ (the user's own state folder, no daemon):
  lock              flock'ed around every change that must agree with the monitor job's existence
  monitor.json      {"job_id": ..., "submitted_at": ...} while a monitor job exists
  runs/<job>.json   one registration per watched run (what a sidecar's command line would say)
  done/<job>.json   registrations of runs the monitor has finished with

A launch writes its registration and, under the lock, submits a monitor job unless one is queued or
running. The monitor retires finished runs and, under the same lock, leaves (and removes
monitor.json) only when no registration is left, so no run is ever left unwatched.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from guarded_sbatch.core.fsutil import read_json, state_dir, write_json_atomic


def monitor_folder(cluster: str) -> Path:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in (cluster or "default"))
    return state_dir() / "shared-monitor" / safe


@contextmanager
def locked(folder: Path) -> Iterator[None]:
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "lock", "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def register_run(folder: Path, job_id: str, entry: dict[str, Any]) -> Path:
    path = folder / "runs" / f"{job_id}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, {**entry, "job_id": job_id, "registered_at": time.time()})
    return path


def registrations(folder: Path) -> list[dict[str, Any]]:
    """The runs the monitor should watch, oldest registration first."""
    found = []
    try:
        names = sorted(os.listdir(folder / "runs"))
    except OSError:
        return []
    for name in names:
        if name.endswith(".json"):
            raw = read_json(folder / "runs" / name)
            if isinstance(raw, dict) and raw.get("job_id"):
                found.append(raw)
    return sorted(found, key=lambda r: float(r.get("registered_at", 0.0)))


def live_count(folder: Path) -> int:
    try:
        return sum(1 for n in os.listdir(folder / "runs") if n.endswith(".json"))
    except OSError:
        return 0


def retire(folder: Path, job_id: str) -> None:
    source = folder / "runs" / f"{job_id}.json"
    target = folder / "done" / f"{job_id}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.replace(source, target)
    except FileNotFoundError:
        pass


def read_monitor(folder: Path) -> dict[str, Any] | None:
    raw = read_json(folder / "monitor.json")
    return raw if isinstance(raw, dict) and raw.get("job_id") else None


def write_monitor(folder: Path, job_id: str) -> None:
    write_json_atomic(folder / "monitor.json", {"job_id": job_id, "submitted_at": time.time()})


def clear_monitor(folder: Path, job_id: str) -> None:
    current = read_monitor(folder)
    if current is not None and str(current["job_id"]) == str(job_id):
        (folder / "monitor.json").unlink(missing_ok=True)
