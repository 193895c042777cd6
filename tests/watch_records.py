"""A run's record and its registration with a watcher of several runs (records/monitor_registry.py), as a launch
writes them: the watcher learns everything about the run from the record (sidecar/plan.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from guarded_sbatch.records import monitor_registry as registry


def write_record(run_dir: Path, job_id: str, run_name: str, *, backend: str = "slurm", tb: Path | None = None,
                 notes: Path | None = None, sidecar: dict[str, Any] | None = None, **fields: Any) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    watch = {"notes": str(notes) if notes else "", "sidecar": sidecar or {}}
    (run_dir / "run.json").write_text(json.dumps({
        "run_id": run_dir.name, "run_name": run_name, "backend": backend, "job_id": job_id,
        "tb_paths": [str(tb)] if tb else [], "watch": watch, **fields}))


def register(folder: Path, job_id: str, run_dir: Path, run_name: str, **record: Any) -> None:
    """The run's record written in `run_dir`, then its registration in `folder`."""
    write_record(run_dir, job_id, run_name, **record)
    registry.register_run(folder, job_id, {"run_dir": str(run_dir), "run_name": run_name})
