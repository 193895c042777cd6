"""`guarded-sbatch sidecar` (the job's watcher) and `guarded-sbatch monitor` (the same for people)."""

from __future__ import annotations

import gc
import json
import os
import stat
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from guarded_sbatch.actions.notify import Alert, NotifySettings, send_alert
from guarded_sbatch.cli.args import ArgumentParser, positive_float
from guarded_sbatch.core.audit import AuditLog
from guarded_sbatch.core.config import load_config
from guarded_sbatch.core.errors import ExitCode, GuardedError, UsageError
from guarded_sbatch.core.jsonnum import dumps as json_dumps
from guarded_sbatch.core.run_sources import SourceSpec, flagged_specs, specs_from_flags
from guarded_sbatch.sidecar.settings import SidecarSettings

if TYPE_CHECKING:
    from guarded_sbatch.core.judge_policy import JudgePolicy
    from guarded_sbatch.core.registry import RunRecord
    from guarded_sbatch.core.run_sources import RunSources
    from guarded_sbatch.sources.kinds import SourceKind


@dataclass(frozen=True)
class Watched:
    """What a sidecar or monitor watches, as the command line says it (`--stop slurm:JOBID` is that job)."""

    job: str | None
    backend: str | None
    stop_target: str | None


@dataclass(frozen=True)
class Cadence:
    fast_interval_s: float
    full_interval_s: float
    job_poll_s: float


def _load_watcher() -> None:
    """Load numpy and what reads and judges with it (the readers, the loop, the report) once: numpy with one OpenBLAS
    thread, and no garbage collection while these modules load.

    At load OpenBLAS starts a thread per core that spins for a while: about 0.1 s of CPU on 2 cores, that much per
    core on a GPU node, beside the training. Nothing here multiplies matrices; the setting is put back at once, so
    no child process inherits it. Loading builds many objects and no garbage, so collections meanwhile only cost
    time; what was loaded is then frozen out of later collections (gc.freeze)."""
    if "numpy" in sys.modules:
        return
    was = os.environ.get("OPENBLAS_NUM_THREADS")
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    collecting = gc.isenabled()
    gc.disable()
    try:
        import numpy  # noqa: F401

        import guarded_sbatch.sidecar.loop
        import guarded_sbatch.sidecar.report
        import guarded_sbatch.sources.kinds  # noqa: F401
    finally:
        if was is None:
            os.environ.pop("OPENBLAS_NUM_THREADS", None)
        else:
            os.environ["OPENBLAS_NUM_THREADS"] = was
        if collecting:
            gc.freeze()
            gc.enable()


def _flagged_kinds() -> list[SourceKind]:
    """sources/kinds.py's kinds with a flag (the readers, and numpy, loaded on first use)."""
    _load_watcher()
    from guarded_sbatch.sources.kinds import flagged_kinds

    return flagged_kinds()


def _add_source_flags(parser: ArgumentParser) -> None:
    for kind in _flagged_kinds():  # every kind in sources/kinds.py with a flag gets it here
        if kind.flag:
            parser.add_argument(kind.flag, dest=f"source_{kind.name}", action="append", type=Path, default=[],
                                help=kind.help)
    parser.add_argument("--log-command", action="append", default=[], metavar="CMD",
                        help="a command whose stdout is the run's recent log, run at each poll "
                             "(e.g. \"ssh gpu07 tail -c 2000000 /scratch/run/train.log\"); failure means WAIT")
    parser.add_argument("--log-command-timeout", type=positive_float, default=30.0, metavar="S",
                        help="seconds the log command may take (default 30)")
    parser.add_argument("--train-loss-key", help="the metric to judge as training loss")
    parser.add_argument("--eval-key", help="the key eval metric")
    parser.add_argument("--baseline", type=float, help="the key metric of a reference run")
    parser.add_argument("--target", dest="target_value", type=float,
                        help="the key metric that would count as success")


def _policy(args: object, record: RunRecord | None = None, *, strict: bool = True) -> JudgePolicy:
    """The thresholds the guarded run was launched with (its record's [judge]: a requeued or restarted sidecar judges
    the same), else the config's [judge]; the flags name the keys on top."""
    import dataclasses

    from guarded_sbatch.core.judge_table import policy_from_table

    from guarded_sbatch.core.judge_policy import JudgePolicy

    try:
        if record is not None and record.judge:
            policy = policy_from_table(record.judge, where=f"run record of {record.run_name}")
        else:
            config = load_config()
            policy = policy_from_table(config.judge, where=", ".join(map(str, config.sources)) or "config")
    except GuardedError as exc:
        if strict:
            raise
        print(f"sidecar: judging with the default thresholds: {exc.message}", flush=True)  # never unguarded
        policy = JudgePolicy()
    flags = {"train_loss_key": getattr(args, "train_loss_key", None), "key_metric": getattr(args, "eval_key", None),
             "baseline": getattr(args, "baseline", None), "target": getattr(args, "target_value", None)}
    return dataclasses.replace(policy, **{k: v for k, v in flags.items() if v is not None})


def _intervals(parser: ArgumentParser, *, from_config: bool = False) -> None:
    """from_config: no default here; the config's cadence fills what the command line leaves out."""
    parser.add_argument("--fast-interval", type=positive_float,
                        default=None if from_config else SidecarSettings.fast_interval_s, help="seconds between reads")
    parser.add_argument("--full-interval", type=positive_float,
                        default=None if from_config else SidecarSettings.full_interval_s,
                        help="seconds between full reports")
    parser.add_argument("--job-poll", type=positive_float, default=None if from_config else SidecarSettings.job_poll_s,
                        help="seconds between scheduler calls")


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


def run_sidecar_command(argv: list[str]) -> int:
    """`guarded-sbatch sidecar`: the watcher the sidecar job runs for one training job."""
    _private_output()
    if argv[:1] == ["--shared"]:
        return run_shared_monitor(argv[1:])
    parser = ArgumentParser(prog="guarded-sbatch sidecar", description="watch one training job (run by the sidecar job)")
    parser.add_argument("--job", required=True)
    parser.add_argument("--backend", choices=["slurm", "local", "process"], required=True)
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--run-name")
    parser.add_argument("--stop-command")
    _stop_flags(parser)
    parser.add_argument("--notes", type=Path)
    _add_source_flags(parser)
    _intervals(parser)
    args = parser.parse_args(argv)
    watched = _watched(args)
    from guarded_sbatch.scheduler import get_scheduler
    from guarded_sbatch.sidecar.loop import Sidecar

    run_dir: Path = args.run_dir
    record = _record_in(run_dir)
    run_name = args.run_name or (record.run_name if record else None) or f"job-{watched.job}"
    notify, audit = _site_actions()
    settings = SidecarSettings(
        run_name=run_name, job_id=watched.job, state_file=run_dir / "sidecar-state.json",
        evidence_dir=run_dir / "evidence", notes_path=args.notes, stop_command=args.stop_command,
        sources=[*_given_sources(args), *(flagged_specs(record) if record is not None else [])],
        fast_interval_s=args.fast_interval, full_interval_s=args.full_interval, job_poll_s=args.job_poll,
        policy=_policy(args, record, strict=False), identity=_identity_of(record),
        notify=notify, audit=audit, **_anywhere_settings(args, watched),
    )
    try:
        return Sidecar(settings, get_scheduler(cast(str, watched.backend)), sys.stdout).run()
    except Exception as exc:
        _alert_sidecar_error(settings, exc)
        raise


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
    from guarded_sbatch.core.registry import RunRecord

    raw = read_json(run_dir / "run.json")
    return RunRecord.from_json(raw) if isinstance(raw, dict) and raw.get("run_id") else None


def _identity_of(record: RunRecord | None) -> RunSources | None:
    from guarded_sbatch.core.run_sources import RunSources

    return RunSources.from_json(getattr(record, "sources", None)) if record is not None else None


def _guarded_run(job_id: str, backend: str) -> object | None:
    """The guarded run of this job on this backend (a local job id and a Slurm job id may be equal)."""
    from guarded_sbatch.core.registry import list_runs

    matches = [r for r in list_runs() if r.job_id == job_id and r.backend == backend]
    return matches[-1] if matches else None


# `monitor --once`: the decision is the exit code, so a script can branch on it without parsing
ONCE_EXIT = {"CONTINUE": 0, "WAIT": 10, "STOP": 11}
ONCE_CODES = ("exit codes with --once: 0 CONTINUE, 10 WAIT, 11 STOP (the same with --json); 2 bad usage, "
              "e.g. a --tb/--wandb/--log path that is not there. A watch (no --once) exits 0 when it ends. "
              "Without --fast-interval/--full-interval/--job-poll a watch follows the config "
              "([sidecar] fast_interval_seconds, job_poll_seconds; check_interval_minutes).")


def _cadence(args: Any) -> Cadence:
    """The command line's cadence; what it leaves out, the config's, as the sidecar of a launch would use."""
    given = (args.fast_interval, args.full_interval, args.job_poll)
    if None not in given:
        return Cadence(*given)
    config = load_config()
    defaults = (config.sidecar.fast_interval_s, config.check_interval_s, config.sidecar.job_poll_s)
    return Cadence(*(value if value is not None else default for value, default in zip(given, defaults)))


def _refuse_missing_paths(args: Any) -> None:
    kinds = {kind.name: kind for kind in _flagged_kinds()}
    for spec in _given_sources(args):
        kind, path = kinds[spec.kind], Path(spec.locator)
        online = "://" in spec.locator or (not kind.needs_existing_path and spec.locator.count("/") == 2)
        if online or path.exists():  # a W&B run URL or entity/project/run_id is read through the API
            continue
        where = f" (relative to {Path.cwd()}, where you ran this)" if not path.is_absolute() else ""
        raise UsageError(f"{kind.flag} {path}: no such file or folder{where}; check the path (for a run that has "
                         "not written yet, leave out --once and watch it)")


def run_monitor(argv: list[str]) -> int:
    """`guarded-sbatch monitor`: judge a run once (--once, the decision is the exit code) or watch it."""
    parser = ArgumentParser(prog="guarded-sbatch monitor", description="judge a run now (--once) or watch it",
                            epilog=ONCE_CODES)
    parser.add_argument("target", nargs="?", help="a folder to search, a log file, or a W&B run path/URL")
    parser.add_argument("--once", action="store_true", help="read what is there now, judge once, exit")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    parser.add_argument("--job", help="a job id to watch (and stop on STOP)")
    parser.add_argument("--backend", choices=["slurm", "local", "process"])
    parser.add_argument("--stop-command")
    _stop_flags(parser)
    parser.add_argument("--notes", type=Path)
    parser.add_argument("--state-dir", type=Path, help="where the watcher keeps state and evidence")
    _add_source_flags(parser)
    _intervals(parser, from_config=True)
    args = parser.parse_args(argv)
    watched = _watched(args)
    from guarded_sbatch.sidecar.loop import Sidecar
    from guarded_sbatch.sidecar.one_shot import check_once
    from guarded_sbatch.sidecar.report import one_line

    if args.once:
        _refuse_missing_paths(args)
    cadence = _cadence(args)
    if args.json and not args.once:
        raise UsageError("monitor --json needs --once (a watch prints reports, not one JSON object): "
                         "use `guarded-sbatch monitor --once --json ...`")
    search_dirs, given = _classify_target(args.target, _given_sources(args))
    if not (given or args.log_command or search_dirs or watched.job):
        raise UsageError("monitor needs something to read: --tb, --wandb, --log, --log-command, a folder, "
                         "a W&B run path, or --job")
    backend, record = None, None
    if watched.job:
        from guarded_sbatch.cli.launch import choose_backend

        backend = choose_backend(load_config(), watched.backend)
        record = cast("RunRecord | None", _guarded_run(watched.job, backend))
    state_dir = args.state_dir or _monitor_state_dir(args, watched)
    explicit = bool(given or args.log_command or search_dirs)
    settings = SidecarSettings(
        run_name=args.target or (record.run_name if record else None) or watched.job or watched.stop_target
        or "monitored run",
        job_id=watched.job or watched.stop_target,  # no job: the stop target names the run
        state_file=state_dir / "monitor-state.json", evidence_dir=state_dir / "evidence",
        notes_path=args.notes, stop_command=args.stop_command, sources=given, search_dirs=search_dirs,
        fast_interval_s=cadence.fast_interval_s, full_interval_s=cadence.full_interval_s, job_poll_s=cadence.job_poll_s,
        policy=_policy(args, record), identity=None if explicit else _identity_of(record),
        **_anywhere_settings(args, watched),
    )
    if args.once:
        verdict, data_source = check_once(replace(settings, job_id=watched.job))
        if args.json:
            payload = {**verdict.to_json(), "data_source": data_source}
            print(json_dumps(payload))
        else:
            print(one_line(verdict, data_source))
        return ONCE_EXIT.get(verdict.decision.value, int(ExitCode.OK))
    scheduler: Any = None
    if backend is not None:
        from guarded_sbatch.scheduler import get_scheduler

        scheduler = get_scheduler(backend)
    elif watched.stop_target:  # no job: the target itself says when the run has ended
        from guarded_sbatch.actions.stop_targets import parse_stop_target
        from guarded_sbatch.actions.target_watch import TargetWatch

        scheduler = TargetWatch(parse_stop_target(watched.stop_target), grace_s=args.stop_grace)
    settings.state_file.unlink(missing_ok=True)  # an interactive watch starts fresh
    what = f"job {watched.job} ({backend})" if watched.job else (watched.stop_target or "the files")
    print(f"guarded-sbatch monitor: watching {what}: metrics read every {settings.fast_interval_s:g} s, "
          f"a full report every {settings.full_interval_s / 60:g} min"
          + (f", the scheduler asked every {settings.job_poll_s:g} s" if watched.job else "")
          + "; Ctrl-C to leave (the run goes on)", file=sys.stderr, flush=True)
    return Sidecar(settings, scheduler, sys.stdout).run()


def _classify_target(target: str | None, given: list[SourceSpec]) -> tuple[list[Path], list[SourceSpec]]:
    """monitor's positional argument: a folder to search, a file (a .wandb log or a text log), or a W&B run."""
    if not target:
        return [], given
    path = Path(target)
    if path.is_dir():
        return [path], given
    if path.is_file():
        kind = "wandb" if target.endswith(".wandb") else "textlog"
        return [], [*given, *specs_from_flags({kind: [path]})]
    parts = target.split("/")
    if target.startswith(("http://", "https://")) or len(parts) == 3 or (len(parts) == 4 and parts[2] == "runs"):
        return [], [*given, *specs_from_flags({"wandb": [target]})]  # a W&B run URL or entity/project/run_id
    raise UsageError(f"{target!r} is neither a folder, a file, nor a W&B run path (entity/project/run_id)")


def _monitor_state_dir(args: Any, watched: Watched) -> Path:
    import hashlib

    from guarded_sbatch.core.fsutil import state_dir

    key = json.dumps([str(args.target), str(watched.job), *(str(getattr(args, name)) for name in (
        "source_tensorboard", "source_wandb", "source_textlog", "log_command"))])
    return state_dir() / "monitor" / hashlib.sha1(key.encode()).hexdigest()[:12]


def _stop_flags(parser: ArgumentParser) -> None:
    parser.add_argument("--stop", dest="stop_target", metavar="TARGET",
                        help="how to stop the run on STOP: tmux:SESSION, pid:PID (its process group), "
                             "ssh:[USER@]HOST[:PORT]:PID, slurm:JOBID; with --stop-command, the command runs "
                             "first and the target is checked (and stopped) after the grace period")
    parser.add_argument("--stop-grace", type=positive_float, default=30.0, metavar="S",
                        help="seconds between interrupt, terminate and kill (default 30)")


def _watched(args: Any) -> Watched:
    """Bad targets fail now, not at the STOP; slurm:JOBID is the job to watch and cancel."""
    watched = Watched(args.job, args.backend, args.stop_target)
    if not args.stop_target:
        return watched
    from guarded_sbatch.actions.stop_targets import parse_stop_target

    target = parse_stop_target(args.stop_target)
    if target.kind != "slurm":
        return watched
    if args.job and args.job != target.value:
        raise UsageError(f"--stop {args.stop_target} and --job {args.job} name different jobs")
    return Watched(target.value, "slurm", None)


def _anywhere_settings(args: Any, watched: Watched) -> dict[str, Any]:
    return {"log_commands": list(args.log_command), "log_command_timeout_s": args.log_command_timeout,
            "stop_target": watched.stop_target, "stop_grace_s": args.stop_grace}


def run_shared_monitor(argv: list[str]) -> int:
    """`guarded-sbatch sidecar --shared`: the per-user monitor job (see sidecar.shared_monitor)."""
    _load_watcher()
    from guarded_sbatch.core.monitor_registry import monitor_folder
    from guarded_sbatch.scheduler import get_scheduler
    from guarded_sbatch.sidecar.shared_monitor import MonitorSettings, SharedMonitor, install_signal_handlers

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


def _given_sources(args: object) -> list[SourceSpec]:
    """The sources named with the registry's flags (--tb, --wandb, --log, --mlflow, --csv, kinds added by register())."""
    return specs_from_flags({kind.name: list(getattr(args, f"source_{kind.name}", [])) for kind in _flagged_kinds()})
