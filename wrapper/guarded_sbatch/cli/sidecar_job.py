"""`guarded-sbatch sidecar FOLDER`: what a watcher job runs. FOLDER is a run's folder (the sidecar job, the watcher of
one training job) or a registration folder (the per-user monitor job, a job array's watcher: the watcher of every run
registered there); everything else comes from the runs' records (sidecar/plan.py)."""

from __future__ import annotations

import gc
import os
import stat
import sys
from pathlib import Path

from guarded_sbatch.actions.notify import Alert, send_alert
from guarded_sbatch.cli.args import ArgumentParser
from guarded_sbatch.core.config import Config, load_config
from guarded_sbatch.core.errors import GuardedError, UsageError
from guarded_sbatch.core.numpy_load import import_numpy
from guarded_sbatch.sidecar.plan import WatchPlan


def load_watcher() -> None:
    """Load numpy and what reads and judges with it (the readers, the loop, the report) once: numpy with one OpenBLAS
    thread (core/numpy_load.py), and no garbage collection while these modules load.

    Loading builds many objects and no garbage, so collections meanwhile only cost time; what was loaded is then
    frozen out of later collections (gc.freeze)."""
    if "numpy" in sys.modules:
        return
    collecting = gc.isenabled()
    gc.disable()
    try:
        import_numpy()
        import guarded_sbatch.sidecar.loop
        import guarded_sbatch.sidecar.report
        import guarded_sbatch.sources.kinds  # noqa: F401
    finally:
        if collecting:
            gc.freeze()
            gc.enable()


def run_sidecar_command(argv: list[str]) -> int:
    """`guarded-sbatch sidecar FOLDER`: the watcher a sidecar or monitor job runs."""
    _private_output()
    parser = ArgumentParser(prog="guarded-sbatch sidecar",
                            description="watch a run (its folder) or the runs registered in a monitor's folder")
    parser.add_argument("folder", type=Path, help="a run's folder (holding run.json) or a registration folder")
    folder: Path = parser.parse_args(argv).folder
    load_watcher()
    from guarded_sbatch.records.registry import RunRecord
    from guarded_sbatch.scheduler import get_scheduler
    from guarded_sbatch.sidecar.loop import Sidecar
    from guarded_sbatch.sidecar.plan import plan_of

    site = _site()
    if not (folder / "run.json").is_file():
        return _watch_registered(folder, site)
    record = RunRecord.from_json(_record_json(folder / "run.json"))
    plan = plan_of(record, folder, site=site)
    try:
        return Sidecar(plan, get_scheduler(record.backend), sys.stdout).run()
    except Exception as exc:
        _alert_sidecar_error(plan, exc)
        raise


def _watch_registered(folder: Path, site: Config | None) -> int:
    """The per-user monitor job or an array's watcher: every run registered in `folder`, on their records' backend."""
    from guarded_sbatch.records import monitor_registry as registry
    from guarded_sbatch.scheduler import get_scheduler
    from guarded_sbatch.sidecar.shared_monitor import SharedMonitor, install_signal_handlers

    entries = registry.registrations(folder)
    if not entries:
        raise UsageError(f"{folder} holds neither a run record (run.json) nor a registered run; name a run's folder")
    backend = str(_record_json(Path(entries[0]["run_dir"]) / "run.json").get("backend"))
    monitor = SharedMonitor(folder, get_scheduler(backend), sys.stdout, job_id=os.environ.get("SLURM_JOB_ID"),
                            site=site)
    install_signal_handlers(monitor)
    return monitor.run()


def _record_json(path: Path) -> dict[str, object]:
    from guarded_sbatch.core.fsutil import read_json

    raw = read_json(path)
    if not (isinstance(raw, dict) and raw.get("run_id")):
        raise UsageError(f"{path} is not a run record; name the folder of a guarded run")
    return raw


def _private_output() -> None:
    """The sidecar's output file (created by the scheduler with the submitter's umask, before the template's
    `umask 077`) lies in the state folder: make it the owner's alone, like everything else there."""
    for fd in (1, 2):
        try:
            info = os.fstat(fd)
            if stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid() and info.st_mode & 0o077:
                os.fchmod(fd, 0o600)
        except OSError:
            pass


def _site() -> Config | None:
    """Where alerts go and the audit trail, read here at run time so the URLs (secrets) never pass through a file."""
    try:
        return load_config()
    except GuardedError as exc:
        print(f"sidecar: alerts and audit off: the config could not be read ({exc.message})", flush=True)
        return None


def _alert_sidecar_error(plan: WatchPlan, exc: Exception) -> None:
    if plan.notify is None:
        return
    outcome = send_alert(plan.notify, Alert(
        event="sidecar_error", run=plan.run_name, job_id=plan.job_id, decision="-", reason="sidecar_error",
        message=f"the sidecar stopped with {type(exc).__name__}: {exc}; the run is no longer watched"))
    print(f"sidecar: alert (sidecar_error): {outcome.detail}", flush=True)
