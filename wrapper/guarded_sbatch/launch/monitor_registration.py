"""Per-user monitor mode at launch: register the run with the user's monitor job, submitting that
job only when none is queued or running (see core.monitor_registry for the folder's contract)."""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guarded_sbatch.core import monitor_registry as registry
from guarded_sbatch.core.redact import secret_fingerprints
from guarded_sbatch.core.registry import RunRecord
from guarded_sbatch.launch.templates import load_template, render_template
from guarded_sbatch.scheduler.interface import Scheduler, SubmitRequest


@dataclass(frozen=True)
class SharedMonitorOptions:
    max_runs: int = 200
    time_limit: str = ""  # the monitor job's --time (it requeues itself before the end)
    partition: str = ""
    qos: str = ""
    account: str = ""
    mem: str = "2G"
    fast_interval_s: float = 60.0
    job_poll_s: float = 300.0
    template_dirs: tuple[Path, ...] = ()


def register_with_monitor(
    scheduler: Scheduler, record: RunRecord, entry: dict[str, Any], options: SharedMonitorOptions,
    *, cluster: str = "", folder: Path | None = None, python: str = sys.executable,
) -> str | None:
    """Register the run; return the monitor's job id, or None when the monitor is full (the caller
    submits a per-job sidecar then)."""
    folder = folder or registry.monitor_folder(cluster)
    with registry.locked(folder):
        if registry.live_count(folder) >= options.max_runs:
            return None
        registry.register_run(folder, record.job_id, {**entry, "run_dir": str(record.folder),
                                                      "run_name": record.run_name,
                                                      "secret_fingerprints": secret_fingerprints()})
        current = registry.read_monitor(folder)
        if current is not None and _alive(scheduler, str(current["job_id"])):
            return str(current["job_id"])
        monitor_id = _submit_monitor(scheduler, folder, options, python)
        registry.write_monitor(folder, monitor_id)
        return monitor_id


def _alive(scheduler: Scheduler, job_id: str) -> bool:
    state = scheduler.state(job_id)
    return not state.is_terminal  # UNKNOWN (no answer) counts as alive: never two monitors for a hiccup


def _submit_monitor(scheduler: Scheduler, folder: Path, options: SharedMonitorOptions, python: str) -> str:
    template_text, _ = load_template("monitor.sbatch", list(options.template_dirs))
    extra = [f"#SBATCH --{flag}={value}" for flag, value in (
        ("partition", options.partition), ("account", options.account), ("qos", options.qos),
        ("time", options.time_limit)) if value]
    args = ["--backend", scheduler.name, "--monitor-dir", str(folder), "--max-runs", str(options.max_runs),
            "--fast-interval", str(options.fast_interval_s), "--job-poll", str(options.job_poll_s)]
    script = render_template(template_text, {
        "MONITOR_DIR": str(folder), "MONITOR_JOB_NAME": "guarded-sbatch-monitor",
        "MONITOR_OUTPUT": str(folder / "monitor-%j.out"), "SIDECAR_CPUS": "1", "SIDECAR_MEM": options.mem,
        "SIDECAR_EXTRA_SBATCH": "\n".join(extra), "PYTHON": shlex.quote(python),
        "MONITOR_ARGS": " ".join(shlex.quote(a) for a in args),
    }, template_name="monitor.sbatch")
    path = folder / "monitor.sbatch"
    path.write_text(script, encoding="utf-8")
    return scheduler.submit(SubmitRequest(script=path, sbatch_options=(), workdir=folder))
