"""`guarded-sbatch status`: the user's guarded runs at a glance."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from guarded_sbatch.core.errors import ExitCode, GuardedError
from guarded_sbatch.core.fsutil import read_json
from guarded_sbatch.core.jsonnum import dumps as json_dumps
from guarded_sbatch.core.registry import RunRecord, list_runs
from guarded_sbatch.core.timefmt import local_timestamp
from guarded_sbatch.scheduler.base import JobState


def run_status(argv: list[str], *, color: bool) -> int:
    from guarded_sbatch.cli.args import ArgumentParser

    parser = ArgumentParser(prog="guarded-sbatch status", description="your guarded runs")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    parser.add_argument("--all", action="store_true", help="include runs that were killed or restarted")
    parser.add_argument("--project", type=Path, metavar="DIR",
                        help="only runs submitted from DIR or a folder below it (e.g. --project .)")
    args = parser.parse_args(argv)
    project = args.project.resolve() if args.project else None
    rows = [run_status_row(r) for r in list_runs()
            if (args.all or not r.ended) and (project is None or _under(r.submit_dir, project))]
    if args.json:
        print(json_dumps({"runs": rows}))
        return int(ExitCode.OK)
    if not rows:
        print("no guarded runs yet", file=sys.stderr)
        return int(ExitCode.OK)
    print(render_table(rows, color=color))
    return int(ExitCode.OK)


def run_status_row(record: RunRecord) -> dict[str, Any]:
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
    return {
        "run": record.run_name, "run_id": record.run_id, "backend": record.backend, "job_id": record.job_id,
        "sidecar_id": record.sidecar_id, "state": state,
        "decision": sidecar.get("last_decision") or "-", "reason": sidecar.get("last_reason") or "-",
        "message": sidecar.get("last_message") or "", "last_step": last_step,
        "steps_per_s": rate, "total_steps": total, "eta": local_timestamp(eta) if eta else None,
        "eta_kind": eta_kind,
        "evidence": sidecar.get("evidence") or None, "data_source": sidecar.get("data_source"),
        "ended": record.ended or None,
        "age": _duration(now - record.submitted_at) if record.submitted_at else None,
        "elapsed": _duration((end or now) - start) if start else None,
        "exit_code": info.exit_code if info and JobState(state).is_terminal else None,
        "stopped_by": stopped_by(state, sidecar, record),
        "submit_dir": record.submit_dir or None,
    }


def stopped_by(state: str, sidecar: dict[str, Any], record: RunRecord) -> str | None:
    """Who ended the run: the guard (its sidecar's STOP), the user (kill, scancel) or the scheduler."""
    if sidecar.get("last_decision") == "STOP" and sidecar.get("finished") and sidecar.get("stop_requested_at"):
        return "guard"  # a STOP on a job that had ended by itself (a crash) stopped nothing"
    if record.ended == "killed":
        return "user (kill)"
    if record.ended == "restarted":
        return "user (restart)"
    if state == "CANCELLED":
        return "user"
    if state in ("TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY"):
        return f"scheduler ({state.lower()})"
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


def render_table(rows: list[dict[str, Any]], *, color: bool) -> str:
    columns = [("RUN", "run"), ("JOB", "job_id"), ("STATE", "state"), ("AGE", "age"), ("ELAPSED", "elapsed"),
               ("EXIT", "exit_code"), ("STOPPED BY", "stopped_by"), ("DECISION", "decision"), ("REASON", "reason"),
               ("STEP", "last_step"), ("ETA", "eta"), ("EVIDENCE", "evidence")]
    cells = [[str(row.get(key) if row.get(key) is not None else "-") for _, key in columns] for row in rows]
    widths = [max(len(title), *(len(c[i]) for c in cells)) for i, (title, _) in enumerate(columns)]
    lines = ["  ".join(title.ljust(w) for (title, _), w in zip(columns, widths)).rstrip()]
    for row_cells in cells:
        line = "  ".join(c.ljust(w) for c, w in zip(row_cells, widths))
        if color:
            decision = row_cells[7]
            code = {"STOP": "31", "WAIT": "33", "CONTINUE": "32"}.get(decision)
            line = f"\x1b[{code}m{line}\x1b[0m" if code else line
        lines.append(line.rstrip())
    return "\n".join(lines)


def run_kill(argv: list[str]) -> int:
    from guarded_sbatch.cli.kill_restart import kill_command

    return kill_command(argv)


def run_restart(argv: list[str]) -> int:
    from guarded_sbatch.cli.kill_restart import restart_command

    return restart_command(argv)
