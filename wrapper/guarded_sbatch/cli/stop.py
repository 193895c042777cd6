"""`guarded-sbatch stop TARGET [--grace S]`: stop a run by hand (tmux:, pid:, ssh:) and say what really happened.

The exit code tells a script which it was (STOP_CODES). A guarded run whose tmux session or process group
this was gets "stopped by user (stop TARGET)" in its record, so `status` says who ended it.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from guarded_sbatch.core.errors import ExitCode, UsageError
from guarded_sbatch.core.waiting import Waiting

if TYPE_CHECKING:
    from guarded_sbatch.records.registry import RunRecord

NOTHING_TO_STOP = int(ExitCode.NOTHING_TO_STOP)
NOT_STOPPED = int(ExitCode.NOT_STOPPED)
STOP_CODES = (f"exit codes: 0 stopped (checked: nothing of it is left); {NOTHING_TO_STOP} nothing to stop (no such "
              f"process or session: it had ended, or never ran); {NOT_STOPPED} NOT stopped (still running, or not "
              "yours); 2 bad usage")
# Set in every job of the local backend: a `stop` run by a watcher (its stop command) or by a job's own trap
# is the guard's or the job's doing, not the user's.
JOB_ENV = "GUARDED_SBATCH_JOB_ID"


def run_stop(argv: list[str]) -> int:
    """`guarded-sbatch stop TARGET`: stop it, check that it took, and say which it was (STOP_CODES)."""
    from guarded_sbatch.actions.stop_targets import parse_stop_target, stop_target, target_alive
    from guarded_sbatch.cli.args import ArgumentParser, positive_float

    parser = ArgumentParser(prog="guarded-sbatch stop", description="stop a run by hand and check that it took",
                            epilog=STOP_CODES)
    parser.add_argument("target", help="tmux:SESSION, pid:PID (its process group), ssh:[USER@]HOST[:PORT]:PID")
    parser.add_argument("--grace", type=positive_float, default=30.0, help="seconds between the signals")
    args = parser.parse_args(argv)
    target = parse_stop_target(args.target)
    if target.kind == "slurm":
        raise UsageError("a Slurm job is stopped with scancel (or guarded-sbatch kill RUN)")
    runs = [] if os.environ.get(JOB_ENV) else _live_runs_of(target.kind, target.value, target.pid)
    said = target.kind != "ssh" and bool(target_alive(target))
    if said:  # a wait is coming: say what for
        print(f"stopping {target}: interrupt, then terminate, then kill, {args.grace:g} s apart, until it is gone",
              file=sys.stderr, flush=True)
    with Waiting(f"{target} to end", said=said):
        outcome = stop_target(target, grace_s=args.grace)
    if not outcome.found:
        print(f"nothing stopped: {outcome.detail}", file=sys.stderr)
        return NOTHING_TO_STOP
    if not outcome.ok:
        print(f"NOT stopped: {outcome.detail}", file=sys.stderr)
        return NOT_STOPPED
    for record in runs:
        record.stopped_by = f"user (stop {target})"
        record.save()
    named = "".join(f"; run {r.run_name} (job {r.job_id})" for r in runs)
    print(f"stopped: {outcome.detail}{named}", file=sys.stderr)
    return int(ExitCode.OK)


def _live_runs_of(kind: str, value: str, pid: int | None) -> list[RunRecord]:
    """The guarded runs, still going, that this target is: a `run --guard-tmux NAME` run for tmux:NAME, a job
    whose process group is PID for pid:PID (on a backend whose jobs are process groups on this host)."""
    from guarded_sbatch.core.errors import GuardedError
    from guarded_sbatch.records.registry import list_runs
    from guarded_sbatch.scheduler import backend_traits, get_scheduler
    from guarded_sbatch.scheduler.interface import Scheduler

    here: dict[str, Scheduler | None] = {}  # only the backends of live runs are imported
    found = []
    for record in list_runs():
        if record.ended or record.stopped_by:
            continue
        try:
            if record.backend not in here:
                groups = backend_traits(record.backend).process_groups_here
                here[record.backend] = get_scheduler(record.backend) if groups else None
            scheduler = here[record.backend]
            if scheduler is None:
                continue
            if kind == "tmux":
                match = f"--guard-tmux={value}" in record.sbatch_options
            else:
                match = kind == "pid" and pid is not None and scheduler.info(record.job_id).pgid == pid
            if match and not scheduler.state(record.job_id).is_terminal:
                found.append(record)
        except GuardedError:
            continue
    return found
