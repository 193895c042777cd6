"""Shared watchers at launch: register the run with the user's monitor job (per-user mode), submitting that
job only when none is queued or running (see records.monitor_registry for the folder's contract); or, for a task of a
job array (`J_T`), with its array's own watcher (sidecar/shared_monitor.py): one job for every task of the array,
submitted at the first task's registration to start after J_T (the first task's start, never the last's: Slurm's
`after:J` waits for every task of a throttled array to start)."""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guarded_sbatch.core import door
from guarded_sbatch.records import monitor_registry as registry
from guarded_sbatch.core.config import Config, SidecarJobSettings
from guarded_sbatch.core.redact import secret_fingerprints
from guarded_sbatch.records.registry import RunRecord
from guarded_sbatch.launch.templates import load_template, render_template
from guarded_sbatch.scheduler.interface import Scheduler, SubmitRequest


@dataclass(frozen=True)
class SharedMonitorOptions:
    max_runs: int = SidecarJobSettings.max_runs_per_monitor
    time_limit: str = ""  # the monitor job's --time (it requeues itself before the end)
    partition: str = ""
    qos: str = ""
    account: str = ""
    mem: str = SidecarJobSettings.monitor_mem
    template_dirs: tuple[Path, ...] = ()
    job_name: str = "guarded-sbatch-monitor"


ARRAY_JOB_POLL_S = 30.0  # an array's tasks record at most this `job_poll_s`: its watcher asks about all of them at
# once this often (<= 120 calls an hour), so it leaves within a minute of the last task's end


def array_watch_options(config: Config, run_name: str) -> SharedMonitorOptions:
    """The watcher job of one job array: the sidecar's resources."""
    job = config.sidecar
    return SharedMonitorOptions(
        max_runs=job.max_runs_per_monitor, time_limit=job.time, partition=job.partition, qos=job.qos,
        account=job.account, mem=job.mem, template_dirs=tuple(config.template_dirs), job_name=f"sidecar-{run_name}"[:128],
    )


def register_with_monitor(
    scheduler: Scheduler, record: RunRecord, options: SharedMonitorOptions,
    *, cluster: str = "", folder: Path | None = None, python: str = sys.executable,
) -> str | None:
    """Register the run; return the monitor's job id, or None when the monitor is full (the caller
    submits a per-job sidecar then). A task of a job array goes to its array's own watcher."""
    array = registry.array_of(record.job_id)
    if array is not None and folder is None:
        return _register_task(scheduler, record, options, registry.array_folder(cluster, array), python)
    folder = folder or registry.monitor_folder(cluster)
    with registry.locked(folder):
        if registry.live_count(folder) >= options.max_runs:
            return None
        registry.register_run(folder, record.job_id, _entry(record))
        current = registry.read_monitor(folder)
        if current is not None and _alive(scheduler, str(current["job_id"])):
            return str(current["job_id"])
        monitor_id = _submit_monitor(scheduler, folder, options, python)
        registry.write_monitor(folder, monitor_id)
        return monitor_id


def _entry(record: RunRecord) -> dict[str, Any]:
    """A registration: the run's folder (its record is what the watcher reads) and the launch's secrets' marks."""
    return {"run_dir": str(record.folder), "run_name": record.run_name, "secret_fingerprints": secret_fingerprints()}


def _register_task(scheduler: Scheduler, record: RunRecord, options: SharedMonitorOptions, folder: Path,
                   python: str) -> str:
    """One task of an array: registered with the array's watcher, which the first task's registration submits (the
    later ones, in the same launch, find it in monitor.json: no scheduler call per task)."""
    with registry.locked(folder):
        registry.register_run(folder, record.job_id, _entry(record))
        current = registry.read_monitor(folder)
        if current is not None:
            return str(current["job_id"])
        watcher = _submit_monitor(scheduler, folder, options, python, after=record.job_id)
        registry.write_monitor(folder, watcher)
        return watcher


def _alive(scheduler: Scheduler, job_id: str) -> bool:
    state = scheduler.state(job_id)
    return not state.is_terminal  # UNKNOWN (no answer) counts as alive: never two monitors for a hiccup


def _submit_monitor(scheduler: Scheduler, folder: Path, options: SharedMonitorOptions, python: str, *,
                    after: str | None = None) -> str:
    template_text, _ = load_template("monitor.sbatch", list(options.template_dirs))
    output = str(folder / "monitor-%j.out")  # in its script's #SBATCH line and in its request, like its name
    extra = [f"#SBATCH --{flag}={value}" for flag, value in (
        ("partition", options.partition), ("account", options.account), ("qos", options.qos),
        ("time", options.time_limit)) if value]
    script = render_template(template_text, {
        "MONITOR_DIR": str(folder), "MONITOR_JOB_NAME": options.job_name, "MONITOR_OUTPUT": output,
        "SIDECAR_CPUS": "1", "SIDECAR_MEM": options.mem,
        "SIDECAR_EXTRA_SBATCH": "\n".join(extra), "PYTHON": shlex.quote(python),
    }, template_name="monitor.sbatch")
    path = folder / "monitor.sbatch"
    door.write_atomic(path, script, 0o600)
    return scheduler.submit(SubmitRequest(script=path, workdir=folder, after=after, job_name=options.job_name,
                                          output=output))
