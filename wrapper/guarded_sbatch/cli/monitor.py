"""`guarded-sbatch sidecar` (the job's watcher) and `guarded-sbatch monitor` (the same for people)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from guarded_sbatch.cli.args import ArgumentParser, positive_float
from guarded_sbatch.core.errors import ExitCode, UsageError
from guarded_sbatch.sidecar.loop import Sidecar, check_once
from guarded_sbatch.sidecar.settings import SidecarSettings


def _add_source_flags(parser: ArgumentParser) -> None:
    parser.add_argument("--tb", action="append", type=Path, default=[], help="TensorBoard event folder or file")
    parser.add_argument("--wandb", action="append", type=Path, default=[], help="W&B run folder or .wandb file")
    parser.add_argument("--log", action="append", type=Path, default=[], help="a text log of the run")
    parser.add_argument("--train-loss-key", help="the metric to judge as training loss")
    parser.add_argument("--eval-key", help="the key eval metric")
    parser.add_argument("--baseline", type=float, help="the key metric of a reference run")
    parser.add_argument("--target", dest="target_value", type=float,
                        help="the key metric that would count as success")


def _policy(args: object) -> object:
    from guarded_sbatch.judge.policy import JudgePolicy

    return JudgePolicy(
        train_loss_key=getattr(args, "train_loss_key", None),
        key_metric=getattr(args, "eval_key", None),
        baseline=getattr(args, "baseline", None),
        target=getattr(args, "target_value", None),
    )


def _intervals(parser: ArgumentParser) -> None:
    parser.add_argument("--fast-interval", type=positive_float, default=60.0, help="seconds between reads")
    parser.add_argument("--full-interval", type=positive_float, default=1800.0, help="seconds between full reports")
    parser.add_argument("--job-poll", type=positive_float, default=300.0, help="seconds between scheduler calls")


def run_sidecar_command(argv: list[str]) -> int:
    if argv[:1] == ["--shared"]:
        return run_shared_monitor(argv[1:])
    parser = ArgumentParser(prog="guarded-sbatch sidecar", description="watch one training job (run by the sidecar job)")
    parser.add_argument("--job", required=True)
    parser.add_argument("--backend", choices=["slurm", "local"], required=True)
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--run-name")
    parser.add_argument("--stop-command")
    parser.add_argument("--notes", type=Path)
    _add_source_flags(parser)
    _intervals(parser)
    args = parser.parse_args(argv)
    from guarded_sbatch.scheduler import get_scheduler

    run_dir: Path = args.run_dir
    run_name = args.run_name or _run_name_from(run_dir) or f"job-{args.job}"
    settings = SidecarSettings(
        run_name=run_name, job_id=args.job, state_file=run_dir / "sidecar-state.json",
        evidence_dir=run_dir / "evidence", notes_path=args.notes, stop_command=args.stop_command,
        tb_paths=args.tb, wandb_paths=args.wandb, log_paths=args.log,
        fast_interval_s=args.fast_interval, full_interval_s=args.full_interval, job_poll_s=args.job_poll,
        policy=_policy(args),
    )
    return Sidecar(settings, get_scheduler(args.backend), sys.stdout).run()


def _run_name_from(run_dir: Path) -> str | None:
    from guarded_sbatch.core.fsutil import read_json

    raw = read_json(run_dir / "run.json")
    return raw.get("run_name") if isinstance(raw, dict) else None


def run_monitor(argv: list[str]) -> int:
    parser = ArgumentParser(prog="guarded-sbatch monitor", description="judge a run now (--once) or watch it")
    parser.add_argument("target", nargs="?", help="a folder to search, a log file, or a W&B run path/URL")
    parser.add_argument("--once", action="store_true", help="read what is there now, judge once, exit")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    parser.add_argument("--job", help="a job id to watch (and stop on STOP)")
    parser.add_argument("--backend", choices=["slurm", "local"])
    parser.add_argument("--stop-command")
    parser.add_argument("--notes", type=Path)
    parser.add_argument("--state-dir", type=Path, help="where the watcher keeps state and evidence")
    _add_source_flags(parser)
    _intervals(parser)
    args = parser.parse_args(argv)
    search_dirs, wandb_run = _classify_target(args.target, args)
    if not (args.tb or args.wandb or args.log or search_dirs or wandb_run or args.job):
        raise UsageError("monitor needs something to read: --tb, --wandb, --log, a folder, a W&B run path, or --job")
    state_dir = args.state_dir or _monitor_state_dir(args)
    settings = SidecarSettings(
        run_name=args.target or args.job or "monitored run", job_id=args.job,
        state_file=state_dir / "monitor-state.json", evidence_dir=state_dir / "evidence",
        notes_path=args.notes, stop_command=args.stop_command, tb_paths=args.tb, wandb_paths=args.wandb,
        log_paths=args.log, search_dirs=search_dirs, wandb_run=wandb_run,
        fast_interval_s=args.fast_interval, full_interval_s=args.full_interval, job_poll_s=args.job_poll,
        policy=_policy(args),
    )
    if args.once:
        verdict, data_source = check_once(settings)
        if args.json:
            payload = {**verdict.to_json(), "data_source": data_source}
            print(json.dumps(payload, default=str, allow_nan=False))
        else:
            print(f"{verdict.decision.value} ({verdict.reason.value}): {verdict.message} [{data_source}]")
        return int(ExitCode.OK)
    scheduler = None
    if args.job:
        from guarded_sbatch.core.config import load_config
        from guarded_sbatch.scheduler import get_scheduler

        scheduler = get_scheduler(args.backend or load_config().scheduler_backend())
    settings.state_file.unlink(missing_ok=True)  # an interactive watch starts fresh
    return Sidecar(settings, scheduler, sys.stdout).run()


def _classify_target(target: str | None, args: object) -> tuple[list[Path], str | None]:
    if not target:
        return [], None
    path = Path(target)
    if path.is_dir():
        return [path], None
    if path.is_file():
        getattr(args, "log").append(path) if not target.endswith(".wandb") else getattr(args, "wandb").append(path)
        return [], None
    if target.startswith(("http://", "https://")) or target.count("/") == 2:
        return [], target  # a W&B run URL or entity/project/run_id
    raise UsageError(f"{target!r} is neither a folder, a file, nor a W&B run path (entity/project/run_id)")


def _monitor_state_dir(args: object) -> Path:
    import hashlib

    from guarded_sbatch.core.fsutil import state_dir

    key = json.dumps([str(getattr(args, name)) for name in ("target", "job", "tb", "wandb", "log")])
    return state_dir() / "monitor" / hashlib.sha1(key.encode()).hexdigest()[:12]


def run_shared_monitor(argv: list[str]) -> int:
    """`guarded-sbatch sidecar --shared`: the per-user monitor job (see sidecar.monitor)."""
    import os

    from guarded_sbatch.core.monitor_registry import monitor_folder
    from guarded_sbatch.scheduler import get_scheduler
    from guarded_sbatch.sidecar.monitor import MonitorSettings, SharedMonitor, install_signal_handlers

    parser = ArgumentParser(prog="guarded-sbatch sidecar --shared", description="watch every registered run of this user")
    parser.add_argument("--backend", choices=["slurm", "local"], required=True)
    parser.add_argument("--monitor-dir", type=Path, help="the registration folder (default: the user's, per cluster)")
    parser.add_argument("--cluster", default="", help="cluster name, for the default folder")
    parser.add_argument("--max-runs", type=int, default=200)
    parser.add_argument("--fast-interval", type=positive_float, default=60.0, help="seconds between reads")
    parser.add_argument("--job-poll", type=positive_float, default=300.0, help="seconds between scheduler calls")
    args = parser.parse_args(argv)
    folder = args.monitor_dir or monitor_folder(args.cluster)
    settings = MonitorSettings(folder=folder, job_id=os.environ.get("SLURM_JOB_ID"),
                               fast_interval_s=args.fast_interval, job_poll_s=args.job_poll, max_runs=args.max_runs)
    monitor = SharedMonitor(settings, get_scheduler(args.backend), sys.stdout)
    install_signal_handlers(monitor)
    return monitor.run()
