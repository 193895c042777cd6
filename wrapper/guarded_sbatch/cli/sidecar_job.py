"""`guarded-sbatch sidecar`: what the sidecar job runs, the watcher of one training job (its sources and thresholds
from the run's record in --run-dir), or with `--shared` the per-user monitor job that watches all of them."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from typing import TYPE_CHECKING, cast

from guarded_sbatch.actions.notify import Alert, NotifySettings, send_alert
from guarded_sbatch.cli.args import ArgumentParser, positive_float
from guarded_sbatch.cli.watch_args import (
    add_interval_flags,
    add_source_flags,
    add_stop_flags,
    anywhere_settings,
    given_sources,
    load_watcher,
    policy_for,
    recorded_sources,
    watched_of,
)
from guarded_sbatch.records.audit import AuditLog
from guarded_sbatch.core.config import load_config
from guarded_sbatch.core.errors import GuardedError
from guarded_sbatch.scheduler import backend_names, launch_backends
from guarded_sbatch.sources.run_sources import flagged_specs
from guarded_sbatch.sidecar.settings import SidecarSettings, recorded_unguarded_after

if TYPE_CHECKING:
    from guarded_sbatch.records.registry import RunRecord


def run_sidecar_command(argv: list[str]) -> int:
    """`guarded-sbatch sidecar`: the watcher the sidecar job runs for one training job."""
    _private_output()
    if argv[:1] == ["--shared"]:
        return run_shared_monitor(argv[1:])
    parser = ArgumentParser(prog="guarded-sbatch sidecar", description="watch one training job (run by the sidecar job)")
    parser.add_argument("--job", required=True)
    parser.add_argument("--backend", choices=backend_names(), required=True)
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--run-name")
    parser.add_argument("--stop-command")
    add_stop_flags(parser)
    parser.add_argument("--notes", type=Path)
    add_source_flags(parser)
    add_interval_flags(parser)
    args = parser.parse_args(argv)
    watched = watched_of(args)
    from guarded_sbatch.scheduler import get_scheduler
    from guarded_sbatch.sidecar.loop import Sidecar

    run_dir: Path = args.run_dir
    record = _record_in(run_dir)
    run_name = args.run_name or (record.run_name if record else None) or f"job-{watched.job}"
    notify, audit = _site_actions()
    settings = SidecarSettings(
        run_name=run_name, job_id=watched.job, state_file=run_dir / "sidecar-state.json",
        evidence_dir=run_dir / "evidence", notes_path=args.notes, stop_command=args.stop_command,
        sources=[*given_sources(args), *(flagged_specs(record) if record is not None else [])],
        fast_interval_s=args.fast_interval, full_interval_s=args.full_interval, job_poll_s=args.job_poll,
        policy=policy_for(args, record, strict=False), identity=recorded_sources(record),
        notify=notify, audit=audit, unguarded_after_s=recorded_unguarded_after(record), **anywhere_settings(args, watched),
    )
    try:
        return Sidecar(settings, get_scheduler(cast(str, watched.backend)), sys.stdout).run()
    except Exception as exc:
        _alert_sidecar_error(settings, exc)
        raise


def run_shared_monitor(argv: list[str]) -> int:
    """`guarded-sbatch sidecar --shared`: the per-user monitor job (see sidecar.shared_monitor)."""
    load_watcher()
    from guarded_sbatch.records.monitor_registry import monitor_folder
    from guarded_sbatch.scheduler import get_scheduler
    from guarded_sbatch.sidecar.array_watch import ArrayWatcher
    from guarded_sbatch.sidecar.shared_monitor import MonitorSettings, SharedMonitor, install_signal_handlers

    parser = ArgumentParser(prog="guarded-sbatch sidecar --shared", description="watch every registered run of this user")
    parser.add_argument("--backend", choices=launch_backends(), required=True)
    parser.add_argument("--monitor-dir", type=Path, help="the registration folder (default: the user's, per cluster)")
    parser.add_argument("--cluster", default="", help="cluster name, for the default folder")
    parser.add_argument("--max-runs", type=int, default=200)
    parser.add_argument("--fast-interval", type=positive_float, default=60.0, help="seconds between reads")
    parser.add_argument("--job-poll", type=positive_float, default=300.0, help="seconds between scheduler calls")
    parser.add_argument("--array-job", help="watch the tasks of this job array (sidecar/array_watch.py)")
    args = parser.parse_args(argv)
    folder = args.monitor_dir or monitor_folder(args.cluster)
    settings = MonitorSettings(folder=folder, job_id=os.environ.get("SLURM_JOB_ID"),
                               fast_interval_s=args.fast_interval, job_poll_s=args.job_poll, max_runs=args.max_runs)
    watcher = ArrayWatcher if args.array_job else SharedMonitor
    monitor = watcher(settings, get_scheduler(args.backend), sys.stdout)
    install_signal_handlers(monitor)
    return monitor.run()


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


def _site_actions() -> tuple[NotifySettings | None, AuditLog | None]:
    """Alerts and audit trail, read here at run time so the URLs (secrets) never pass through a job script."""
    try:
        config = load_config()
    except GuardedError as exc:
        print(f"sidecar: alerts and audit off: the config could not be read ({exc.message})", flush=True)
        return None, None
    notify = NotifySettings(urls=config.notify_urls, on=config.notify_on, wait_long_s=config.notify_wait_long_s)
    return notify, AuditLog.from_config(config)


def _alert_sidecar_error(settings: SidecarSettings, exc: Exception) -> None:
    if settings.notify is None:
        return
    outcome = send_alert(settings.notify, Alert(
        event="sidecar_error", run=settings.run_name, job_id=settings.job_id, decision="-", reason="sidecar_error",
        message=f"the sidecar stopped with {type(exc).__name__}: {exc}; the run is no longer watched"))
    print(f"sidecar: alert (sidecar_error): {outcome.detail}", flush=True)


def _record_in(run_dir: Path) -> RunRecord | None:
    from guarded_sbatch.core.fsutil import read_json
    from guarded_sbatch.records.registry import RunRecord

    raw = read_json(run_dir / "run.json")
    return RunRecord.from_json(raw) if isinstance(raw, dict) and raw.get("run_id") else None
