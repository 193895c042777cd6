"""`guarded-sbatch monitor`: judge a run once (`--once`, the decision is the exit code) or watch it as a sidecar
would — a folder, a log, a W&B run, a job, or a run anywhere through a log command and a stop target."""

from __future__ import annotations

import dataclasses
import json
import sys
from argparse import BooleanOptionalAction, Namespace, RawDescriptionHelpFormatter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from guarded_sbatch.core import door
from guarded_sbatch.cli.args import ArgumentParser, positive_float
from guarded_sbatch.cli.monitor_once import ONCE_EXIT as ONCE_EXIT, judge_runs_once  # ONCE_EXIT: read here by scripts
from guarded_sbatch.core.config import load_config, watcher_flags
from guarded_sbatch.core.errors import UsageError
from guarded_sbatch.core.waiting import FittedStream, fit, tell, terminal_width
from guarded_sbatch.scheduler import backend_names
from guarded_sbatch.sources.run_sources import SourceSpec, specs_from_flags

if TYPE_CHECKING:
    from guarded_sbatch.records.registry import RunRecord
    from guarded_sbatch.sources.kinds import SourceKind


@dataclass(frozen=True)
class Watched:
    """What a monitor watches, as the command line says it (`--stop slurm:JOBID` is that job)."""

    job: str | None
    backend: str | None
    stop_target: str | None


def _guarded_run(job_id: str, backend: str | None, configured: str) -> tuple[str, RunRecord | None]:
    """The backend to watch job `job_id` on and your guarded run of it there (one registry read). Without
    --backend, the backend the run was launched on: a local run is watched locally (a Slurm job may hold the same
    number); runs on several: the configured one, if among them."""
    from guarded_sbatch.records.registry import list_runs

    runs = [r for r in list_runs() if r.job_id == job_id]
    if backend is None:
        backends = sorted({r.backend for r in runs})
        if len(backends) > 1 and configured not in backends:
            raise UsageError(f"job {job_id} names a guarded run on each of {', '.join(backends)}: say which with "
                             f"--backend {backends[0]}")
        backend = configured if configured in backends or not backends else backends[0]
    matches = [r for r in runs if r.backend == backend]
    return backend, matches[-1] if matches else None


EXAMPLES = """examples:
  judge a TensorBoard folder now:
    guarded-sbatch monitor --once --tb runs/exp
  watch a run started anywhere, and stop its tmux session on STOP:
    guarded-sbatch monitor --log-command "ssh gpu07 tail -c 2000000 train.log" \\
        --stop tmux:train"""
ONCE_CODES = ("exit codes with --once: 0 CONTINUE, 10 WAIT, 11 STOP (the same with --json); 2 bad usage, "
              "e.g. a --tb/--wandb/--log path that is not there. A watch (no --once) exits 0 when it ends. "
              "Without " + "/".join(flag for flag, _, _ in watcher_flags()) + " a watch follows the config ("
              + ", ".join(key for _, _, key in watcher_flags()) + ").")


def _refuse_missing_paths(args: Namespace) -> None:
    kinds = {kind.name: kind for kind in flagged_kinds()}
    for spec in given_sources(args):
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
                            epilog=f"{fit(ONCE_CODES, 79, indent='')}\n\n{EXAMPLES}", formatter_class=RawDescriptionHelpFormatter)
    parser.add_argument("target", nargs="?", help="a folder to search, a log file, or a W&B run path/URL")
    parser.add_argument("--once", action="store_true", help="read what is there now, judge once, exit")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    parser.add_argument("--run", help="with --once, of a folder's several runs judge this one (a writer's pid, or "
                                      "a part of its folder or file); default: the newest writer")
    parser.add_argument("--all-runs", action="store_true", help="with --once, judge each run of the folder")
    parser.add_argument("--job", metavar="ID", help="a job id to watch (and stop on STOP)")
    parser.add_argument("--backend", choices=backend_names(),
                        help="where the job of --job runs (default: GUARDED_SBATCH_BACKEND, else the config's)")
    parser.add_argument("--stop-command", metavar="CMD", help="a command that stops the run, run on STOP (wins over "
                                                             "cancelling the job)")
    parser.add_argument("--stop", dest="stop_target", metavar="TARGET",
                        help="how to stop the run on STOP: tmux:SESSION, pid:PID (its process group), "
                             "ssh:[USER@]HOST[:PORT]:PID, slurm:JOBID; with --stop-command, the command runs "
                             "first and the target is checked (and stopped) after the grace period")
    parser.add_argument("--stop-grace", type=positive_float, metavar="S",
                        help="seconds between interrupt, terminate and kill (default 30)")
    parser.add_argument("--notes", type=Path, metavar="FILE", help="the project notes file a STOP appends to")
    parser.add_argument("--state-dir", type=Path, metavar="DIR", help="where the watcher keeps state and evidence")
    parser.add_argument("--heartbeat", action=BooleanOptionalAction, default=None,
                        help="a line (step, time, decision) between reports, at most every few seconds (default: "
                             "on when the output is a terminal)")
    add_source_flags(parser)
    for flag, name, key in watcher_flags():
        parser.add_argument(flag, dest=name, type=positive_float, metavar="S", help=f"seconds (default: the config's {key})")
    args = parser.parse_args(argv)
    watched = watched_of(args)
    if (args.run or args.all_runs) and not args.once:
        raise UsageError("--run and --all-runs choose what --once judges; add --once")
    if args.once:
        _refuse_missing_paths(args)
    if args.json and not args.once:
        raise UsageError("monitor --json needs --once (a watch prints reports, not one JSON object): "
                         "use `guarded-sbatch monitor --once --json ...`")
    search_dirs, given = _classify_target(args.target, given_sources(args))
    if not (given or args.log_command or search_dirs or watched.job):
        raise UsageError("monitor needs something to read: --tb, --wandb, --log, --log-command, a folder, "
                         "a W&B run path, or --job")
    backend, guarded = None, None
    if watched.job:
        from guarded_sbatch.cli.launch import choose_backend

        configured = choose_backend(load_config(), watched.backend)  # a bad --backend or environment: named here
        backend, guarded = _guarded_run(watched.job, watched.backend, configured)
    from guarded_sbatch.cli.sidecar_job import load_watcher

    load_watcher()  # numpy (one OpenBLAS thread), the readers and the loop: only once there is a run to judge
    from guarded_sbatch.sidecar.loop import Sidecar
    from guarded_sbatch.sidecar.plan import plan_of

    record = _monitor_record(args, watched, guarded, backend or "", given, search_dirs)
    plan = plan_of(record, args.state_dir or _monitor_state_dir(args, watched, given))
    if guarded is not None:  # its STOP is the guarded run's too: saved where `status` and the run's sidecar read it
        import os

        plan = dataclasses.replace(plan, run_state_file=guarded.sidecar_state_file,
                                   watcher=f"`guarded-sbatch monitor --job {watched.job}` (pid {os.getpid()})")
    if args.once:
        return judge_runs_once(plan, args.run, args.all_runs, args.json)
    scheduler: Any = None
    if backend is not None:
        from guarded_sbatch.scheduler import get_scheduler

        scheduler = get_scheduler(backend)
    elif watched.stop_target:  # no job: the target itself says when the run has ended
        from guarded_sbatch.actions.stop_targets import parse_stop_target
        from guarded_sbatch.actions.target_watch import TargetWatch

        scheduler = TargetWatch(parse_stop_target(watched.stop_target), grace_s=plan.stop_grace_s)
    door.remove(plan.state_file)  # an interactive watch starts fresh
    what = f"job {watched.job} ({backend})" if watched.job else (watched.stop_target or "the files")
    from guarded_sbatch.sidecar.report import cadence_text

    tell(f"guarded-sbatch monitor: watching {what}: {cadence_text(plan)}; Ctrl-C to leave (the run goes on)")
    from guarded_sbatch.cli.monitor_live import LiveView, wants_heartbeat

    watcher = LiveView if wants_heartbeat(args.heartbeat, sys.stdout) else Sidecar
    width = terminal_width(sys.stdout)
    if width is None:
        return watcher(plan, scheduler, sys.stdout).run()
    fitted = FittedStream(sys.stdout, width)  # on a terminal, reports and diagnostics wrapped as every message is
    try:
        return watcher(plan, scheduler, fitted).run()  # type: ignore[arg-type]  # a text stream: write, flush
    finally:
        fitted.finish()


def _monitor_record(args: Namespace, watched: Watched, guarded: RunRecord | None, backend: str,
                    given: list[SourceSpec], search_dirs: list[Path]) -> RunRecord:
    """The command line as a run record, which the watcher reads like a guarded run's (sidecar/plan.py): the guarded
    run's own record when `--job` names one and no source is named outright (its sources, its thresholds)."""
    config = load_config()
    explicit = bool(given or args.log_command or search_dirs)
    own = guarded if guarded is not None and not explicit else None
    judge = dict(guarded.judge if guarded is not None and guarded.judge else config.judge)
    flags = {"train_loss_key": args.train_loss_key, "key_metric": args.eval_key, "baseline": args.baseline,
             "target": args.target_value}
    judge.update({name: value for name, value in flags.items() if value is not None})
    from guarded_sbatch.judge.table import policy_from_table
    from guarded_sbatch.records.registry import RunRecord

    where = f"run record of {guarded.run_name}" if guarded is not None and guarded.judge else \
        (", ".join(map(str, config.sources)) or "config")
    policy_from_table(judge, where=where)  # a bad threshold is said now, in one line
    sidecar = dataclasses.replace(config.sidecar, **{name: vars(args)[name] for _, name, _ in watcher_flags()
                                                     if vars(args)[name] is not None})
    watch = {"sidecar": dataclasses.asdict(sidecar), "stop_command": args.stop_command or "",
             "notes": str(args.notes) if args.notes else "", "named": [spec.to_json() for spec in given],
             "search_dirs": [str(folder) for folder in search_dirs], "log_commands": list(args.log_command),
             "log_command_timeout_s": args.log_command_timeout, "stop_target": watched.stop_target or "",
             "stop_grace_s": args.stop_grace}
    name = args.target or (guarded.run_name if guarded else None) or watched.job or watched.stop_target or "monitored run"
    if own is not None:
        return dataclasses.replace(own, run_name=name, judge=judge, watch=watch)
    return RunRecord(run_id="monitor", run_name=name, backend=backend, job_id=watched.job or watched.stop_target or "",
                     judge=judge, watch=watch)


def flagged_kinds() -> list[SourceKind]:
    """sources/kinds.py's kinds with a flag: their declarations only (light); the readers load when a source opens."""
    from guarded_sbatch.sources.kinds import flagged_kinds as kinds_with_flags

    return kinds_with_flags()


def add_source_flags(parser: ArgumentParser) -> None:
    for kind in flagged_kinds():  # every kind in sources/kinds.py with a flag gets it here
        if kind.flag:
            parser.add_argument(kind.flag, dest=f"source_{kind.name}", action="append", type=Path, default=[],
                                metavar="PATH", help=kind.help)
    parser.add_argument("--log-command", action="append", default=[], metavar="CMD",
                        help="a command whose stdout is the run's recent log, run at each poll "
                             "(e.g. \"ssh gpu07 tail -c 2000000 /scratch/run/train.log\"); failure means WAIT")
    parser.add_argument("--log-command-timeout", type=positive_float, metavar="S",
                        help="seconds the log command may take (default 30)")
    parser.add_argument("--train-loss-key", metavar="KEY", help="the metric to judge as training loss")
    parser.add_argument("--eval-key", metavar="KEY", help="the key eval metric")
    parser.add_argument("--baseline", type=float, metavar="VALUE", help="the key metric of a reference run")
    parser.add_argument("--target", dest="target_value", type=float,
                        help="the key metric that would count as success")


def given_sources(args: Namespace) -> list[SourceSpec]:
    """The sources named with the kinds' flags (--tb, --wandb, --log, --mlflow, --csv, ...)."""
    return specs_from_flags({kind.name: list(vars(args).get(f"source_{kind.name}", [])) for kind in flagged_kinds()})


def watched_of(args: Namespace) -> Watched:
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


def _monitor_state_dir(args: Namespace, watched: Watched, given: list[SourceSpec]) -> Path:
    import hashlib

    from guarded_sbatch.core.fsutil import state_dir

    key = json.dumps([str(args.target), str(watched.job), *(spec.to_json() for spec in given),
                      *map(str, args.log_command)])
    return state_dir() / "monitor" / hashlib.sha1(key.encode()).hexdigest()[:12]
