"""The registry of guarded runs: one folder per run under the state folder, holding run.json,
the rendered sidecar script, the sidecar's state, its output and the evidence of a STOP."""

from __future__ import annotations

import re
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from guarded_sbatch.core.errors import UsageError
from guarded_sbatch.core.fsutil import read_json, state_dir, write_json_atomic

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass
class RunRecord:
    run_id: str
    run_name: str
    backend: str
    job_id: str
    sidecar_id: str = ""
    monitor_id: str = ""  # per-user mode: the shared monitor job watching this run (never cancelled with it)
    script: str = ""
    sbatch_options: list[str] = field(default_factory=list)
    script_args: list[str] = field(default_factory=list)
    submit_dir: str = ""
    submitted_at: float = 0.0
    tb_paths: list[str] = field(default_factory=list)
    wandb_paths: list[str] = field(default_factory=list)
    log_paths: list[str] = field(default_factory=list)
    checkpoint_dir: str = ""
    artifact_dir: str = ""
    tracker: dict[str, Any] = field(default_factory=dict)
    waivers: list[dict[str, str]] = field(default_factory=list)
    restarted_from: str = ""
    total_steps: int | None = None  # from the run's config, for the live ETA
    planned_end: float | None = None  # the pre-flight's ETA (epoch seconds)
    ended: str = ""  # "killed", "restarted" once the lifecycle commands are done with it
    launched_by: str = "cli"  # "cli" (guarded-sbatch) or "submitit" (GuardedExecutor)

    @property
    def folder(self) -> Path:
        return runs_root() / self.run_id

    @property
    def sidecar_state_file(self) -> Path:
        return self.folder / "sidecar-state.json"

    @property
    def evidence_dir(self) -> Path:
        return self.folder / "evidence"

    def save(self) -> None:
        """Write run.json; secrets (API keys, tokens in the script args or options) are redacted first."""
        write_json_atomic(self.folder / "run.json", _redacted(asdict(self)))

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> "RunRecord":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in known})


def _redacted(value: Any) -> Any:
    from guarded_sbatch.core.redact import redact

    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {key: _redacted(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_redacted(item) for item in value]
    return value


def runs_root() -> Path:
    return state_dir() / "runs"


def new_run_id(run_name: str, job_id: str) -> str:
    return f"{_UNSAFE.sub('_', run_name)[:80]}-{job_id}"


def create_run(run_name: str, backend: str, job_id: str, **values: Any) -> RunRecord:
    record = RunRecord(run_id=new_run_id(run_name, job_id), run_name=run_name, backend=backend, job_id=job_id,
                       submitted_at=time.time(), **values)
    record.folder.mkdir(parents=True, exist_ok=True)
    record.save()
    return record


def list_runs() -> list[RunRecord]:
    root = runs_root()
    if not root.is_dir():
        return []
    records = []
    for folder in sorted(root.iterdir()):
        raw = read_json(folder / "run.json")
        if isinstance(raw, dict):
            records.append(RunRecord.from_json(raw))
    return sorted(records, key=lambda r: r.submitted_at)


def find_run(key: str) -> RunRecord:
    """A run by its id, its job id, or its name (the newest run of that name)."""
    runs = list_runs()
    for record in reversed(runs):
        if key in (record.run_id, record.job_id):
            return record
    named = [r for r in runs if r.run_name == key]
    if named:
        return named[-1]
    raise UsageError(f"no guarded run called {key!r}; `guarded-sbatch status` lists your runs")
