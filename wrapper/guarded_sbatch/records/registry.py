"""The registry of guarded runs: one folder per run under the state folder, holding run.json,
the rendered sidecar script, the sidecar's state, its output and the evidence of a STOP."""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from guarded_sbatch.core.errors import UsageError
from guarded_sbatch.core.fsutil import locked, make_private_dirs, read_json, state_dir, update_json, write_json_atomic
from guarded_sbatch.core.redact import redact_tree

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
SIDECAR_STATE = "sidecar-state.json"  # in a run's folder: what its sidecar last saw


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
    sources: dict[str, Any] = field(default_factory=dict)  # sources/run_sources.RunSources: what is this run's own
    config_path: str = ""  # the run's config, for `reference` and the default reference of its family
    waivers: list[dict[str, str]] = field(default_factory=list)
    restarted_from: str = ""
    total_steps: int | None = None  # from the run's config, for the live ETA
    planned_end: float | None = None  # the pre-flight's ETA (epoch seconds)
    ended: str = ""  # "killed", "restarted" once the lifecycle commands are done with it
    stopped_by: str = ""  # who ended a live job, written by the command that did ("user (kill)", ...)
    launched_by: str = "cli"  # "cli" (guarded-sbatch) or "submitit" (GuardedExecutor)
    judge: dict[str, Any] = field(default_factory=dict)  # [judge] thresholds at launch: its sidecar judges with these
    guard_words: list[str] = field(default_factory=list)  # the launch's guard options as given: what restart replays
    watch: dict[str, Any] = field(default_factory=dict)  # what every watcher of the run is told (sidecar/plan.py)

    @property
    def folder(self) -> Path:
        return runs_root() / self.run_id

    @property
    def sidecar_state_file(self) -> Path:
        return self.folder / SIDECAR_STATE

    @property
    def evidence_dir(self) -> Path:
        return self.folder / "evidence"

    def save(self) -> None:
        """Write run.json under its lock; secrets are redacted first. Only the fields this copy changed
        since it was loaded are written over what is on disk now, so a concurrent writer (the sidecar
        recording its W&B run while `kill` saves) loses nothing."""
        current = _redacted(asdict(self))
        loaded_raw = getattr(self, "_loaded_raw", None)  # redacted only when saved: most records read are not
        base = _redacted(loaded_raw) if loaded_raw is not None else getattr(self, "_loaded", None)
        make_private_dirs(self.folder)

        def merge(on_disk: dict[str, Any]) -> None:
            for key, value in current.items():
                if base is None or key not in on_disk or base.get(key) != value:
                    on_disk[key] = value

        object.__setattr__(self, "_loaded", update_json(self.folder / "run.json", merge))
        object.__setattr__(self, "_loaded_raw", None)

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> "RunRecord":
        known = {f.name for f in fields(cls)}
        kept = {k: v for k, v in raw.items() if k in known and _plain(v)}
        try:
            record = cls(**kept)
        except TypeError:
            raise UsageError("a run record lacks run_id, run_name, backend or job_id: edited by hand?") from None
        object.__setattr__(record, "_loaded_raw", asdict(record))
        return record


def _plain(value: Any) -> bool:
    return isinstance(value, (str, int, float, bool, list, dict)) or value is None


def update_record(folder: Path, change: Any) -> dict[str, Any]:
    """Locked read-modify-write of a run's run.json (for writers that own one field, like the sidecar)."""
    def redacted_change(data: dict[str, Any]) -> None:
        before = {key: json.dumps(value, sort_keys=True, default=str) for key, value in data.items()}
        change(data)
        for key, value in data.items():  # only what the change touched is redacted again
            if before.get(key) != json.dumps(value, sort_keys=True, default=str):
                data[key] = _redacted(value)

    return update_json(folder / "run.json", redacted_change)


def pin_launch_root(folder: Path, submit_dir: str) -> None:
    """Remember, once at launch, the submit folder and its identity (device, inode): with no run roots
    configured, cleanup may delete only inside this folder, whatever run.json says later."""
    if not submit_dir:
        return
    try:
        info = os.stat(submit_dir)
    except OSError:
        return
    path = folder / "launch-root.json"
    with locked(path):
        if not path.exists():
            write_json_atomic(path, {"submit_dir": os.path.realpath(submit_dir), "dev": info.st_dev, "ino": info.st_ino})


def launch_root(record: "RunRecord") -> Path | None:
    """The submit folder pinned at launch, when it still is the same folder and the record agrees."""
    raw = read_json(record.folder / "launch-root.json")
    if not isinstance(raw, dict) or not isinstance(raw.get("submit_dir"), str):
        return None
    pinned = raw["submit_dir"]
    if not record.submit_dir or os.path.realpath(record.submit_dir) != pinned:
        return None  # run.json was edited (or the folder moved): no default root
    try:
        info = os.stat(pinned)
    except OSError:
        return None
    if (info.st_dev, info.st_ino) != (raw.get("dev"), raw.get("ino")):
        return None  # another folder now stands at that path
    return Path(pinned)


def _redacted(value: Any) -> Any:

    return redact_tree(value)


def runs_root() -> Path:
    return state_dir() / "runs"


def new_run_id(run_name: str, job_id: str) -> str:
    return f"{_UNSAFE.sub('_', run_name)[:80]}-{job_id}"


def create_run(run_name: str, backend: str, job_id: str, **values: Any) -> RunRecord:
    record = RunRecord(run_id=new_run_id(run_name, job_id), run_name=run_name, backend=backend, job_id=job_id,
                       submitted_at=time.time(), **values)
    if record.run_id in over_runs():  # a job id handed out again (a cluster reset): this run is a new one
        _update_index(lambda over: over.pop(record.run_id, None))
    make_private_dirs(record.folder)
    record.save()
    pin_launch_root(record.folder, record.submit_dir)
    return record


def list_runs() -> list[RunRecord]:
    root = runs_root()
    if not root.is_dir():
        return []
    records = []
    for folder in sorted(root.iterdir()):
        raw = read_json(folder / "run.json", own=True)  # a co-worker's run.json never names what kill deletes
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


# The index of runs whose job is over, so that a launch never loads their run.json nor asks the scheduler about
# them again: a launch's cost does not grow with the user's history (launch/checks/own_folder.py).
ENDED = "ENDED"  # over, final state unknown: the scheduler no longer lists the job


def index_path() -> Path:
    return state_dir() / "run-index.json"


def over_runs() -> dict[str, str]:
    """The runs known to be over, by run id: their final state ("COMPLETED", ..., or ENDED)."""
    raw = read_json(index_path(), own=True)
    over = raw.get("over") if isinstance(raw, dict) else None
    if not isinstance(over, dict):
        return {}
    return {key: value for key, value in over.items() if isinstance(value, str) and value}


def mark_over(states: dict[str, str]) -> None:
    """Remember that these runs' jobs are over, with their final state (whoever learns it first: a launch,
    a watcher): from then on they cost a launch nothing."""
    if states:
        _update_index(lambda over: over.update(states))


def _update_index(change: Any) -> None:
    def apply(data: dict[str, Any]) -> None:
        found = data.get("over")
        over: dict[str, Any] = found if isinstance(found, dict) else {}
        change(over)
        data["over"] = over

    update_json(index_path(), apply)


def open_runs() -> list[dict[str, Any]]:
    """The run.json (as read) of every run not known to be over: only these are read, whatever the history."""
    root = runs_root()
    if not root.is_dir():
        return []
    over = over_runs()
    found = []
    for name in os.listdir(root):
        if name not in over:
            raw = read_json(root / name / "run.json", own=True)
            if isinstance(raw, dict):
                found.append(raw)
    return found
