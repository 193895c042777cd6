"""The status table: plain columns for a pipe; on a terminal rich, fitted to its width, coloured by decision
(rich is imported only then: it costs ~0.05 s, and the login path never pays it)."""

from __future__ import annotations

import io
import shutil
from collections import Counter
from typing import Any

from guarded_sbatch.core.extras import installed
from guarded_sbatch.core.waiting import fit

# (title, row key), left to right
COLUMNS = [("RUN", "run"), ("JOB", "job_id"), ("STATE", "state"), ("AGE", "age"), ("ELAPSED", "elapsed"),
           ("EXIT", "exit"), ("STOPPED BY", "stopped_by"), ("ENDED", "ended_at"), ("DECISION", "decision"),
           ("REASON", "reason"), ("STEP", "last_step"), ("ETA", "eta"), ("EVIDENCE", "evidence")]


def cell(row: dict[str, Any], key: str) -> str:
    """A row's value as the table shows it (`-` for none)."""
    value = row.get(key)
    if key == "decision" and row.get("reason") == "unguarded":
        return "UNGUARDED"  # a WAIT on a run its guard cannot read (judge Reason.UNGUARDED): seen at a glance
    return "-" if value is None else str(value)


def render_table(rows: list[dict[str, Any]]) -> str:
    """Plain columns for a pipe (awk, grep): every column, no colours, no truncation."""
    cells = [[cell(row, key) for _, key in COLUMNS] for row in rows]
    widths = [max(len(title), *(len(c[i]) for c in cells)) for i, (title, _) in enumerate(COLUMNS)]
    lines = ["  ".join(title.ljust(w) for (title, _), w in zip(COLUMNS, widths)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row_cells, widths)).rstrip() for row_cells in cells]
    return "\n".join(lines)


# When the terminal is too narrow for every column, these go first, in this order; the identifying columns RUN (always
# whole: a name cut in the middle is no name) and JOB, with STATE and DECISION, always stay. STOPPED BY is shortened to
# who (`user`, not `user (kill)`) before it goes. Too narrow even for those: a list, a run's name on a line of its own
# and its facts (its job first) under it.
DROP_ORDER = ("evidence", "age", "eta", "ended_at", "elapsed", "reason", "last_step", "exit", "stopped_by")
# squeue's short state codes, and a decision's first letters: an array's counted cells (`status --collapse`,
# `COMPLETED(3),CANCELLED(1)`) as `CD(3),CA(1)`, tried before any column goes, so its row fits as plain status's do
SHORT_STATES = {"PENDING": "PD", "RUNNING": "R", "SUSPENDED": "S", "COMPLETING": "CG", "REQUEUED": "RQ",
                "COMPLETED": "CD", "FAILED": "F", "CANCELLED": "CA", "TIMEOUT": "TO", "PREEMPTED": "PR",
                "NODE_FAIL": "NF", "OUT_OF_MEMORY": "OOM", "UNKNOWN": "?", "CONTINUE": "CONT"}
COUNTED = ("state", "decision")


def _short_counts(text: str) -> str:
    """`COMPLETED(3),CANCELLED(1)` as `CD(3),CA(1)`; a single value (no count) as it is."""
    if "(" not in text:
        return text
    parts = [part.partition("(") for part in text.split(",")]
    return ",".join(f"{SHORT_STATES.get(name, name)}{sep}{rest}" for name, sep, rest in parts)


SHORTENED = {"stopped_by": lambda text: text.split(" (", 1)[0], "state": _short_counts, "decision": _short_counts}
GAP = 2
STYLES = {"STOP": "red", "UNGUARDED": "magenta", "WAIT": "yellow", "CONTINUE": "green"}


def fitted_columns(rows: list[dict[str, Any]], width: int) -> list[tuple[str, str, int]]:
    """(title, key, width) of the columns shown at this width, each at its natural width (a shortened one: at its
    short cells' width, `short_cell` draws them)."""
    def natural(title: str, key: str, short: bool = False) -> int:
        return max(len(title), *(len(short_cell(row, key) if short else cell(row, key)) for row in rows))

    columns = [(title, key, natural(title, key)) for title, key in COLUMNS]

    def needed(cols: list[tuple[str, str, int]]) -> int:
        return sum(w for _, _, w in cols) + GAP * (len(cols) - 1)

    if needed(columns) > width:
        columns = [(t, k, natural(t, k, True) if k in COUNTED else w) for t, k, w in columns]

    for key in DROP_ORDER:
        if needed(columns) <= width:
            break
        if key in SHORTENED:
            shortened = [(t, k, natural(t, k, True) if k == key else w) for t, k, w in columns]
            if needed(shortened) <= width:
                return shortened
        columns = [c for c in columns if c[1] != key]
    return columns


def short_cell(row: dict[str, Any], key: str) -> str:
    """A cell as a narrow table shows it: shortened where SHORTENED says how."""
    text = cell(row, key)
    return SHORTENED[key](text) if key in SHORTENED else text


def _style(decision: str) -> str | None:
    """A run's colour by its decision; an array's row (`CONTINUE(3),STOP(1)`) by the worst of its tasks'."""
    return next((STYLES[d] for d in STYLES if decision == d or decision.startswith(f"{d}(") or f",{d}(" in decision),
                None)


def render_terminal(rows: list[dict[str, Any]], *, color: bool, width: int | None = None) -> str:
    """The table for a terminal: the columns that fit `width` (run names whole), coloured rows; a list when even
    the name, state and decision do not fit side by side. Without rich (the `terminal` extra): plain columns."""
    if not installed("rich"):
        return render_table(rows)
    width = width or shutil.get_terminal_size((100, 24)).columns
    columns = fitted_columns(rows, width)
    if sum(w for _, _, w in columns) + GAP * (len(columns) - 1) > width:
        return _render_list(rows, color=color, width=width)
    from rich.console import Console  # lazy: see the module's docstring
    from rich.table import Table

    table = Table(box=None, padding=(0, GAP, 0, 0), pad_edge=False, show_edge=False, collapse_padding=True,
                  header_style="bold" if color else "")
    for title, key, natural in columns:
        table.add_column(title, no_wrap=True, width=natural)
    for row in rows:
        style = _style(cell(row, "decision")) if color else None
        table.add_row(*(short_cell(row, key) if len(cell(row, key)) > natural else cell(row, key)
                        for _, key, natural in columns), style=style)
    out = io.StringIO()
    console = Console(file=out, width=width, force_terminal=color, no_color=not color, color_system="standard",
                      highlight=False, emoji=False, soft_wrap=False)
    console.print(table)
    dropped = [title for title, key in COLUMNS if key not in {c[1] for c in columns}]
    text = "\n".join(line.rstrip() for line in out.getvalue().splitlines()) + "\n"
    text += _codes_note(rows, columns, width)
    if dropped:
        note = f"(not shown at {width} columns: {', '.join(dropped)}; status --json has every field)"
        text += (note if len(note) <= width else "(more in: guarded-sbatch status --json)") + "\n"
    return text


def _codes_note(rows: list[dict[str, Any]], columns: list[tuple[str, str, int]], width: int) -> str:
    """What the short state codes shown stand for (`CD completed`), when STATE is shown short."""
    if not any(key == "state" and natural < len(cell(row, key)) for _, key, natural in columns for row in rows):
        return ""
    shown = {name for row in rows if "(" in cell(row, "state") for name, _, _ in
             (part.partition("(") for part in cell(row, "state").split(","))}
    codes = ", ".join(f"{SHORT_STATES[name]} {name.lower()}" for name in SHORT_STATES if name in shown)
    return fit(f"(squeue's state codes: {codes})", width, indent=" ") + "\n"


def _render_list(rows: list[dict[str, Any]], *, color: bool, width: int) -> str:
    """A run per paragraph: its name whole, then its job, state, decision, reason and step, wrapped to `width`."""
    lines: list[str] = []
    for row in rows:
        lines.append(str(row.get("run") or "-"))
        facts = (f"job {cell(row, 'job_id')}  {cell(row, 'state')}  {cell(row, 'decision')}  {cell(row, 'reason')}  "
                 f"step {cell(row, 'last_step')}")
        text = fit("  " + facts, max(width, 20), indent="  ")
        style = _style(cell(row, "decision")) if color else None
        code = {"red": "31", "magenta": "35", "yellow": "33", "green": "32"}.get(style or "")
        lines.append(f"\033[{code}m{text}\033[0m" if code else text)
    return "\n".join(lines) + "\n"


def collapse_arrays(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per job array (its tasks' rows `J_T` folded into it, where the first task's row stood), every other
    row as it is. The array's row counts its tasks' states, decisions and who stopped them (`COMPLETED(3),
    CANCELLED(1)`), names the reasons of its tasks that were not CONTINUE, and keeps the task rows under `tasks`."""
    arrays: dict[str, list[dict[str, Any]]] = {}
    out: list[dict[str, Any]] = []
    for row in rows:
        job, sep, task = str(row.get("job_id") or "").partition("_")
        if not (sep and job.isdigit() and task.isdigit()):
            out.append(row)
            continue
        if job not in arrays:
            arrays[job] = []
            out.append({"job_id": job, "_array": True})
        arrays[job].append(row)
    return [_array_row(arrays[row["job_id"]], row["job_id"]) if row.get("_array") else row for row in out]


def _counted(rows: list[dict[str, Any]], key: str) -> str | None:
    counts = Counter(str(row[key]) for row in rows if row.get(key) not in (None, "-"))
    return ",".join(f"{value}({n})" for value, n in counts.most_common()) or None


def _array_row(tasks: list[dict[str, Any]], job: str) -> dict[str, Any]:
    first = tasks[0]
    unusual = [f"{row['job_id']} {row['reason']}" for row in tasks
               if row.get("decision") not in ("CONTINUE", "-", None) and row.get("reason") not in (None, "-")]
    ended = [str(row["ended_at"]) for row in tasks if row.get("ended_at")]
    return {
        "run": first.get("run"), "run_id": None, "backend": first.get("backend"), "job_id": job,
        "state": _counted(tasks, "state"), "decision": _counted(tasks, "decision") or "-",
        "reason": "; ".join(unusual) or "-", "stopped_by": _counted(tasks, "stopped_by"), "exit": _counted(tasks, "exit"),
        "age": first.get("age"), "elapsed": None,
        "ended_at": max(ended) if len(ended) == len(tasks) else None, "last_step": None, "eta": None,
        "evidence": ",".join(str(r["evidence"]) for r in tasks if r.get("evidence")) or None,
        "task_count": len(tasks), "tasks": tasks,
    }
