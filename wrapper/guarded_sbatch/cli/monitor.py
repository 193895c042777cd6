"""`guarded-sbatch monitor`: judge a run once (`--once`, the decision is the exit code) or watch it as a sidecar
would — a folder, a log, a W&B run, a job, or a run anywhere through a log command and a stop target."""

from __future__ import annotations

import json
import sys
import textwrap
from argparse import Namespace, RawDescriptionHelpFormatter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from guarded_sbatch.core import door
from guarded_sbatch.cli.args import ArgumentParser
from guarded_sbatch.cli.monitor_once import ONCE_EXIT as ONCE_EXIT, judge_runs_once  # ONCE_EXIT: read here by scripts
from guarded_sbatch.cli.watch_args import (
    Watched,
    add_interval_flags,
    add_source_flags,
    add_stop_flags,
    anywhere_settings,
    flagged_kinds,
    given_sources,
    policy_for,
    recorded_sources,
    watched_of,
)
from guarded_sbatch.core.config import load_config
from guarded_sbatch.core.errors import UsageError
from guarded_sbatch.scheduler import backend_names
from guarded_sbatch.sources.run_sources import SourceSpec, specs_from_flags
from guarded_sbatch.sidecar.settings import SidecarSettings

if TYPE_CHECKING:
    from guarded_sbatch.records.registry import RunRecord


@dataclass(frozen=True)
class Cadence:
    fast_interval_s: float
    full_interval_s: float
    job_poll_s: float


def _guarded_run(job_id: str, backend: str) -> object | None:
    """The guarded run of this job on this backend (a local job id and a Slurm job id may be equal)."""
    from guarded_sbatch.records.registry import list_runs

    matches = [r for r in list_runs() if r.job_id == job_id and r.backend == backend]
    return matches[-1] if matches else None


EXAMPLES = """examples:
  judge a TensorBoard folder now:
    guarded-sbatch monitor --once --tb runs/exp
  watch a run started anywhere, and stop its tmux session on STOP:
    guarded-sbatch monitor --log-command "ssh gpu07 tail -c 2000000 train.log" \\
        --stop tmux:train"""
ONCE_CODES = ("exit codes with --once: 0 CONTINUE, 10 WAIT, 11 STOP (the same with --json); 2 bad usage, "
              "e.g. a --tb/--wandb/--log path that is not there. A watch (no --once) exits 0 when it ends. "
              "Without --fast-interval/--full-interval/--job-poll a watch follows the config "
              "([sidecar] fast_interval_seconds, job_poll_seconds; check_interval_minutes).")


def _cadence(args: Namespace) -> Cadence:
    """The command line's cadence; what it leaves out, the config's, as the sidecar of a launch would use."""
    given = (args.fast_interval, args.full_interval, args.job_poll)
    if None not in given:
        return Cadence(*given)
    config = load_config()
    defaults = (config.sidecar.fast_interval_s, config.check_interval_s, config.sidecar.job_poll_s)
    return Cadence(*(value if value is not None else default for value, default in zip(given, defaults)))


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
                            epilog=f"{textwrap.fill(ONCE_CODES, 79)}\n\n{EXAMPLES}", formatter_class=RawDescriptionHelpFormatter)
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
    add_stop_flags(parser)
    parser.add_argument("--notes", type=Path, metavar="FILE", help="the project notes file a STOP appends to")
    parser.add_argument("--state-dir", type=Path, metavar="DIR", help="where the watcher keeps state and evidence")
    add_source_flags(parser)
    add_interval_flags(parser, from_config=True)
    args = parser.parse_args(argv)
    watched = watched_of(args)
    from guarded_sbatch.sidecar.loop import Sidecar
    if (args.run or args.all_runs) and not args.once:
        raise UsageError("--run and --all-runs choose what --once judges; add --once")
    if args.once:
        _refuse_missing_paths(args)
    cadence = _cadence(args)
    if args.json and not args.once:
        raise UsageError("monitor --json needs --once (a watch prints reports, not one JSON object): "
                         "use `guarded-sbatch monitor --once --json ...`")
    search_dirs, given = _classify_target(args.target, given_sources(args))
    if not (given or args.log_command or search_dirs or watched.job):
        raise UsageError("monitor needs something to read: --tb, --wandb, --log, --log-command, a folder, "
                         "a W&B run path, or --job")
    backend, record = None, None
    if watched.job:
        from guarded_sbatch.cli.launch import choose_backend

        backend = choose_backend(load_config(), watched.backend)
        record = cast("RunRecord | None", _guarded_run(watched.job, backend))
    state_dir = args.state_dir or _monitor_state_dir(args, watched, given)
    explicit = bool(given or args.log_command or search_dirs)
    settings = SidecarSettings(
        run_name=args.target or (record.run_name if record else None) or watched.job or watched.stop_target
        or "monitored run",
        job_id=watched.job or watched.stop_target,  # no job: the stop target names the run
        state_file=state_dir / "monitor-state.json", evidence_dir=state_dir / "evidence",
        notes_path=args.notes, stop_command=args.stop_command, sources=given, search_dirs=search_dirs,
        fast_interval_s=cadence.fast_interval_s, full_interval_s=cadence.full_interval_s, job_poll_s=cadence.job_poll_s,
        policy=policy_for(args, record), identity=None if explicit else recorded_sources(record),
        **anywhere_settings(args, watched),
    )
    if args.once:
        return judge_runs_once(replace(settings, job_id=watched.job), args.run, args.all_runs, args.json)
    scheduler: Any = None
    if backend is not None:
        from guarded_sbatch.scheduler import get_scheduler

        scheduler = get_scheduler(backend)
    elif watched.stop_target:  # no job: the target itself says when the run has ended
        from guarded_sbatch.actions.stop_targets import parse_stop_target
        from guarded_sbatch.actions.target_watch import TargetWatch

        scheduler = TargetWatch(parse_stop_target(watched.stop_target), grace_s=args.stop_grace)
    door.remove(settings.state_file)  # an interactive watch starts fresh
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


def _monitor_state_dir(args: Namespace, watched: Watched, given: list[SourceSpec]) -> Path:
    import hashlib

    from guarded_sbatch.core.fsutil import state_dir

    key = json.dumps([str(args.target), str(watched.job), *(spec.to_json() for spec in given),
                      *map(str, args.log_command)])
    return state_dir() / "monitor" / hashlib.sha1(key.encode()).hexdigest()[:12]
