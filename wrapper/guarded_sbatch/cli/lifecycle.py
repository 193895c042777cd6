"""`guarded-sbatch status`: the user's guarded runs at a glance."""

from __future__ import annotations

import fnmatch
import math
import sys
import time
from pathlib import Path
from typing import Any

from guarded_sbatch.cli.status_table import collapse_arrays, render_table, render_terminal
from guarded_sbatch.core.errors import ExitCode, GuardedError, UsageError
from guarded_sbatch.core.fsutil import read_json
from guarded_sbatch.core.jsonnum import dumps as json_dumps
from guarded_sbatch.records.registry import RunRecord, list_runs
from guarded_sbatch.core.suggest import did_you_mean
from guarded_sbatch.core.timefmt import local_timestamp
from guarded_sbatch.core.waiting import Waiting
from guarded_sbatch.scheduler.interface import JobState


STATES = tuple(state.value for state in JobState)


def run_status(argv: list[str], *, color: bool) -> int:
    """`guarded-sbatch status`: the user's guarded runs, live and ended, as a table or JSON."""
    from guarded_sbatch.cli.args import ArgumentParser

    parser = ArgumentParser(prog="guarded-sbatch status", description="your guarded runs, live and ended")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    parser.add_argument("--all", action="store_true",
                        help="also runs that were restarted (their new run is listed anyway)")
    parser.add_argument("--project", type=Path, metavar="DIR",
                        help="only runs submitted from DIR or a folder below it (e.g. --project .)")
    parser.add_argument("--state", metavar="STATE[,STATE]",
                        help=f"only runs in these states (as squeue -t: {', '.join(STATES)}; any case)")
    parser.add_argument("--name", metavar="NAME",
                        help="only runs of this name (shell wildcards allowed, e.g. --name 'coco-*')")
    parser.add_argument("--collapse", action="store_true",
                        help="one row per job array (its tasks' states and decisions counted) instead of one per task")
    args = parser.parse_args(argv)
    wanted = parse_states(args.state) if args.state else None
    project = args.project.resolve() if args.project else None
    records = [r for r in list_runs()
               if (args.all or r.ended != "restarted") and (project is None or _under(r.submit_dir, project))
               and (args.name is None or fnmatch.fnmatchcase(r.run_name, args.name))]
    rows: list[dict[str, Any]] = []
    with Waiting(f"the scheduler's word on {len(records)} run(s)") as told:  # a busy controller answers slowly
        for record in records:
            rows.append(run_status_row(record))
            told.detail = f"{len(rows)} of {len(records)} asked"
    if wanted is not None:
        rows = [row for row in rows if row["state"] in wanted]
    if args.collapse:
        rows = collapse_arrays(rows)
    if args.json:
        print(json_dumps({"runs": rows}))
        return int(ExitCode.OK)
    if not rows:
        print("no guarded runs match" if (wanted or args.name or project) else "no guarded runs yet",
              file=sys.stderr)
        return int(ExitCode.OK)
    if sys.stdout.isatty():
        print(render_terminal(rows, color=color), end="")
    else:
        print(render_table(rows))
    return int(ExitCode.OK)


def parse_states(text: str) -> set[str]:
    """`--state running,failed` to Slurm's state names; a mistyped one is a usage error with a suggestion."""
    states = set()
    for word in filter(None, (w.strip().upper() for w in text.split(","))):
        if word not in STATES:
            raise UsageError(f"--state {word}: no such state; {did_you_mean(word, STATES)}the states are "
                             f"{', '.join(STATES)}")
        states.add(word)
    return states


def run_status_row(record: RunRecord) -> dict[str, Any]:
    """One run's row: its state, times, exit code, who stopped it, last decision and ETA (the JSON keys)."""
    from guarded_sbatch.scheduler import get_scheduler

    state, info = "UNKNOWN", None
    try:
        info = get_scheduler(record.backend).info(record.job_id)
        state = info.state.value
    except GuardedError:
        pass
    sidecar = read_json(record.sidecar_state_file) or {}
    now = time.time()
    start = info.start_time if info else None
    end = info.end_time if info else None
    eta, eta_kind = None, None
    total = record.total_steps
    rate, last_step = sidecar.get("step_rate"), sidecar.get("last_step")
    if total and rate and last_step is not None and rate > 0 and state in ("RUNNING", "PENDING", "REQUEUED"):
        eta, eta_kind = time.time() + max(0, int(total) - int(last_step)) / float(rate), "live"
    elif record.planned_end and state in ("RUNNING", "PENDING", "REQUEUED", "UNKNOWN"):
        eta, eta_kind = record.planned_end, "planned"
    terminal = JobState(state).is_terminal
    exit_code = info.exit_code if info and terminal else None
    reason, message = sidecar.get("last_reason") or "-", sidecar.get("last_message") or ""
    if sidecar.get("job_note") and state in ("PENDING", "REQUEUED", "NODE_FAIL"):
        reason, message = "node_lost", str(sidecar["job_note"])  # why it waits (or ended): a node died, not the run
    return {
        "run": record.run_name, "run_id": record.run_id, "backend": record.backend, "job_id": record.job_id,
        "sidecar_id": record.sidecar_id, "state": state,
        "decision": sidecar.get("last_decision") or "-", "reason": reason, "message": message, "last_step": last_step,
        "steps_per_s": rate, "total_steps": total, "eta": local_timestamp(eta) if eta else None,
        "eta_kind": eta_kind,
        "evidence": sidecar.get("evidence") or None, "data_source": sidecar.get("data_source"),
        "ended": record.ended or None,
        "ended_at": local_timestamp(end) if end and terminal else None,
        "age": _duration(now - record.submitted_at) if record.submitted_at else None,
        "elapsed": elapsed(JobState(state), start, end, now),
        "exit_code": exit_code,
        "exit": sacct_exit(exit_code),
        "stopped_by": stopped_by(state, sidecar, record, end),
        "submit_dir": record.submit_dir or None,
    }


def elapsed(state: JobState, start: float | None, end: float | None, now: float) -> str | None:
    """How long the job has run: from its start to now while it runs, to its end once ended; None (`-`) while
    pending, or when its end is unknown. Never its time limit (the backends hand a job's start and end only once
    it has them: scheduler/slurm_parse.held_times)."""
    if start is None or state in (JobState.PENDING, JobState.REQUEUED, JobState.UNKNOWN):
        return None
    if state.is_terminal:
        return _duration(end - start) if end else None
    return _duration(now - start)


def sacct_exit(code: int | None) -> str | None:
    """An exit status as sacct writes it, `exit:signal`: 1 is `1:0`, killed by SIGTERM (-15) is `0:15`."""
    if code is None:
        return None
    return f"0:{-code}" if code < 0 else f"{code}:0"


def stopped_by(state: str, sidecar: dict[str, Any], record: RunRecord,
               end_time: float | None = None) -> str | None:
    """Who ended the run, from the records: the command that stopped a live job wrote its name into the
    run's record (kill, restart, stop tmux:/pid:); the guard when its sidecar's STOP came before the job's
    end (while the job is still being stopped, "guard (stopping)"); the scheduler for its own ends; the job itself
    when it failed before anyone acted; else nobody (a run that completed, or one still going)."""
    if record.stopped_by:
        return record.stopped_by
    job_state = JobState(state)
    stop_at = float(sidecar.get("stop_requested_at") or 0)
    from guarded_sbatch.scheduler import backend_traits

    backend = backend_traits(record.backend)
    if backend.whole_second_times:
        stop_at = math.floor(stop_at)  # its end times are whole seconds
    # the sidecar saves its STOP and the time of its stop before it cancels (sidecar/loop.py), so the guard is named
    # from the first moment, not once its evidence is written
    guard_stop = sidecar.get("last_decision") == "STOP" and stop_at
    # a job that had ended by itself before the STOP (a crash the sidecar then judged) was not the guard's
    if guard_stop and job_state.is_terminal and state != "COMPLETED" and (end_time is None or end_time >= stop_at):
        return "guard"
    if guard_stop and not job_state.is_terminal:
        return "guard (stopping)"
    if state == "CANCELLED":
        return f"user ({backend.cancel_command})"
    if state in ("TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY", "DEADLINE", "BOOT_FAIL"):
        return f"scheduler ({state.lower()})"
    if state == "FAILED":
        return "itself (failed)"
    return None


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s"


def _under(folder: str, project: Path) -> bool:
    if not folder:
        return False
    path = Path(folder).resolve()
    return path == project or project in path.parents


def run_kill(argv: list[str]) -> int:
    """`guarded-sbatch kill RUN` (cli/kill_restart.py)."""
    from guarded_sbatch.cli.kill_restart import kill_command

    return kill_command(argv)


def run_restart(argv: list[str]) -> int:
    """`guarded-sbatch restart RUN` (cli/kill_restart.py)."""
    from guarded_sbatch.cli.kill_restart import restart_command

    return restart_command(argv)
