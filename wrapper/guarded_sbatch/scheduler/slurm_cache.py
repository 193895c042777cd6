"""Final states of Slurm jobs, remembered on disk.

Without accounting (no slurmdbd) a finished job vanishes from squeue/scontrol after MinJobAge, and with it
the only record of how it ended. Every terminal state the Slurm backend sees is written here, so a later
question about that job still gets its final answer.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from guarded_sbatch.core import door
from guarded_sbatch.core.fsutil import make_private_dirs
from guarded_sbatch.scheduler.interface import JobInfo
from guarded_sbatch.scheduler.slurm_parse import slurm_state

CACHE_FILE_NAME = "slurm-final-states.json"
MAX_ENTRIES = 5000  # oldest entries are dropped beyond this; a final state matters for days, not years


def default_state_dir() -> Path:
    configured = os.environ.get("GUARDED_SBATCH_STATE_DIR")
    if configured:
        return Path(configured)
    return Path.home() / ".cache" / "guarded-sbatch"


class FinalStateCache:
    """A small JSON file `{"<cluster>:<job id>": {...job fields..., "recorded_at": epoch}}`.

    Writes are atomic (temporary file + rename) and serialised with a lock file, because the sidecar and the
    CLI may record at the same time.
    """

    def __init__(self, state_dir: Path | None = None) -> None:
        self.path = (state_dir or default_state_dir()) / CACHE_FILE_NAME

    def get(self, cluster: str, job_id: str) -> dict[str, Any] | None:
        entry = self._read().get(_key(cluster, job_id))
        return entry if isinstance(entry, dict) else None

    def get_many(self, cluster: str, job_ids: list[str]) -> dict[str, dict[str, Any]]:
        """The remembered jobs among job_ids, with one read of the file."""
        entries = self._read()
        found = {job_id: entries.get(_key(cluster, job_id)) for job_id in job_ids}
        return {job_id: entry for job_id, entry in found.items() if isinstance(entry, dict)}

    def put(self, cluster: str, job_id: str, fields: dict[str, Any]) -> None:
        """Record (merge) fields for a job; unknown fields already stored are kept."""
        make_private_dirs(self.path.parent)
        with self._locked():
            entries = self._read()
            key = _key(cluster, job_id)
            found = entries.get(key)
            previous: dict[str, Any] = found if isinstance(found, dict) else {}
            entries[key] = {**previous, **fields, "recorded_at": time.time()}
            if len(entries) > MAX_ENTRIES:
                newest = sorted(entries.items(), key=lambda item: item[1].get("recorded_at", 0.0))[-MAX_ENTRIES:]
                entries = dict(newest)
            self._write(entries)

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(door.read(self.path, 64 << 20).text())
        except (OSError, ValueError):
            return {}  # missing or damaged: start afresh rather than fail a status query
        return data if isinstance(data, dict) else {}

    def _write(self, entries: dict[str, Any]) -> None:
        door.write_atomic(self.path, json.dumps(entries, sort_keys=True), 0o600, durable=True)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with door.lock_file(self.path.with_suffix(".lock")):
            yield


def info_to_fields(info: JobInfo) -> dict[str, Any]:
    """A job as the cache stores it (JSON: its state by name)."""
    fields = dataclasses.asdict(info)
    fields["state"] = info.state.value
    return fields


def info_from_fields(fields: dict[str, Any]) -> JobInfo:
    known = {f.name for f in dataclasses.fields(JobInfo)}
    values = {key: value for key, value in fields.items() if key in known}
    values["state"] = slurm_state(str(values.get("state", "")))
    values.setdefault("job_id", "")
    return JobInfo(**values)


def _key(cluster: str, job_id: str) -> str:
    return f"{cluster}:{job_id}"
