"""What the watcher commands (`sidecar`, `monitor`) share: the source, cadence and stop flags, what the command line
says is watched, and the thresholds a watch judges with. The readers and numpy are loaded here, once, the first
time a command needs them."""

from __future__ import annotations

import dataclasses
import gc
import os
import sys
from argparse import Namespace
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from guarded_sbatch.cli.args import ArgumentParser, positive_float
from guarded_sbatch.core.config import load_config
from guarded_sbatch.core.errors import GuardedError, UsageError
from guarded_sbatch.sources.run_sources import SourceSpec, specs_from_flags
from guarded_sbatch.sidecar.settings import SidecarSettings

if TYPE_CHECKING:
    from guarded_sbatch.judge.policy import JudgePolicy
    from guarded_sbatch.records.registry import RunRecord
    from guarded_sbatch.sources.run_sources import RunSources
    from guarded_sbatch.sources.kinds import SourceKind


@dataclass(frozen=True)
class Watched:
    """What a sidecar or monitor watches, as the command line says it (`--stop slurm:JOBID` is that job)."""

    job: str | None
    backend: str | None
    stop_target: str | None


def load_watcher() -> None:
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


def flagged_kinds() -> list[SourceKind]:
    """sources/kinds.py's kinds with a flag (the readers, and numpy, loaded on first use)."""
    load_watcher()
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
    parser.add_argument("--log-command-timeout", type=positive_float, default=30.0, metavar="S",
                        help="seconds the log command may take (default 30)")
    parser.add_argument("--train-loss-key", metavar="KEY", help="the metric to judge as training loss")
    parser.add_argument("--eval-key", metavar="KEY", help="the key eval metric")
    parser.add_argument("--baseline", type=float, metavar="VALUE", help="the key metric of a reference run")
    parser.add_argument("--target", dest="target_value", type=float,
                        help="the key metric that would count as success")


def given_sources(args: Namespace) -> list[SourceSpec]:
    """The sources named with the kinds' flags (--tb, --wandb, --log, --mlflow, --csv, ...)."""
    return specs_from_flags({kind.name: list(vars(args).get(f"source_{kind.name}", [])) for kind in flagged_kinds()})


def add_interval_flags(parser: ArgumentParser, *, from_config: bool = False) -> None:
    """from_config: no default here; the config's cadence fills what the command line leaves out."""
    parser.add_argument("--fast-interval", type=positive_float, metavar="S",
                        default=None if from_config else SidecarSettings.fast_interval_s, help="seconds between reads")
    parser.add_argument("--full-interval", type=positive_float, metavar="S",
                        default=None if from_config else SidecarSettings.full_interval_s,
                        help="seconds between full reports")
    parser.add_argument("--job-poll", type=positive_float, metavar="S",
                        default=None if from_config else SidecarSettings.job_poll_s,
                        help="seconds between scheduler calls")


def add_stop_flags(parser: ArgumentParser) -> None:
    parser.add_argument("--stop", dest="stop_target", metavar="TARGET",
                        help="how to stop the run on STOP: tmux:SESSION, pid:PID (its process group), "
                             "ssh:[USER@]HOST[:PORT]:PID, slurm:JOBID; with --stop-command, the command runs "
                             "first and the target is checked (and stopped) after the grace period")
    parser.add_argument("--stop-grace", type=positive_float, default=30.0, metavar="S",
                        help="seconds between interrupt, terminate and kill (default 30)")


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


def anywhere_settings(args: Namespace, watched: Watched) -> dict[str, Any]:
    """The SidecarSettings of a run watched through a log command and stopped the way it was launched."""
    return {"log_commands": list(args.log_command), "log_command_timeout_s": args.log_command_timeout,
            "stop_target": watched.stop_target, "stop_grace_s": args.stop_grace}


def policy_for(args: Namespace, record: RunRecord | None = None, *, strict: bool = True) -> JudgePolicy:
    """The thresholds the guarded run was launched with (its record's [judge]: a requeued or restarted sidecar judges
    the same), else the config's [judge]; the flags name the keys on top."""
    from guarded_sbatch.judge.policy import JudgePolicy
    from guarded_sbatch.judge.table import policy_from_table

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
    flags = {"train_loss_key": args.train_loss_key, "key_metric": args.eval_key, "baseline": args.baseline,
             "target": args.target_value}
    return dataclasses.replace(policy, **{k: v for k, v in flags.items() if v is not None})


def recorded_sources(record: RunRecord | None) -> RunSources | None:
    """What the guarded run's record says are its own sources (None without a record)."""
    from guarded_sbatch.sources.run_sources import RunSources

    return RunSources.from_json(record.sources) if record is not None else None
