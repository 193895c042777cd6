"""The status table: plain columns for a pipe; on a terminal rich, fitted to its width, coloured by decision
(rich is imported only then: it costs ~0.05 s, and the login path never pays it)."""

from __future__ import annotations

import io
import shutil
from collections import Counter
from typing import Any

# (title, row key), left to right
COLUMNS = [("RUN", "run"), ("JOB", "job_id"), ("STATE", "state"), ("AGE", "age"), ("ELAPSED", "elapsed"),
           ("EXIT", "exit"), ("STOPPED BY", "stopped_by"), ("ENDED", "ended_at"), ("DECISION", "decision"),
           ("REASON", "reason"), ("STEP", "last_step"), ("ETA", "eta"), ("EVIDENCE", "evidence")]


def cell(row: dict[str, Any], key: str) -> str:
    """A row's value as the table shows it (`-` for none)."""
    value = row.get(key)
    return "-" if value is None else str(value)


def render_table(rows: list[dict[str, Any]]) -> str:
    """Plain columns for a pipe (awk, grep): every column, no colours, no truncation."""
    cells = [[cell(row, key) for _, key in COLUMNS] for row in rows]
    widths = [max(len(title), *(len(c[i]) for c in cells)) for i, (title, _) in enumerate(COLUMNS)]
    lines = ["  ".join(title.ljust(w) for (title, _), w in zip(COLUMNS, widths)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row_cells, widths)).rstrip() for row_cells in cells]
    return "\n".join(lines)


# When the terminal is too narrow for every column, these go first, in this order; RUN, JOB, STATE,
# EXIT, STOPPED BY and DECISION always stay (a long run name is shortened with an ellipsis instead).
DROP_ORDER = ("evidence", "age", "reason", "eta", "elapsed", "ended_at", "last_step")
SHRINKABLE = "run"
GAP = 2
STYLES = {"STOP": "red", "WAIT": "yellow", "CONTINUE": "green"}
MIN_RUN_WIDTH = 12


def fitted_columns(rows: list[dict[str, Any]], width: int) -> list[tuple[str, str, int]]:
    """(title, key, natural width) of the columns shown at this width."""
    columns = [(title, key, max(len(title), *(len(cell(row, key)) for row in rows))) for title, key in COLUMNS]

    def needed(cols: list[tuple[str, str, int]]) -> int:
        return sum(min(w, MIN_RUN_WIDTH) if key == SHRINKABLE else w for _, key, w in cols) + GAP * (len(cols) - 1)

    for key in DROP_ORDER:
        if needed(columns) <= width:
            break
        columns = [c for c in columns if c[1] != key]
    return columns


def middle_cut(text: str, size: int) -> str:
    """Too long for its column: keep both ends (run names differ at the end: `...-bs64-lr3e-4`)."""
    if len(text) <= size:
        return text
    head = (size - 1) // 2
    return text[:head] + "…" + text[len(text) - (size - 1 - head):]


def _style(decision: str) -> str | None:
    """A run's colour by its decision; an array's row (`CONTINUE(3),STOP(1)`) by the worst of its tasks'."""
    return next((STYLES[d] for d in STYLES if decision == d or decision.startswith(f"{d}(") or f",{d}(" in decision),
                None)


def render_terminal(rows: list[dict[str, Any]], *, color: bool, width: int | None = None) -> str:
    """The table for a terminal: the columns that fit `width`, the run name cut in the middle, coloured rows."""
    from rich.console import Console  # lazy: see the module's docstring
    from rich.table import Table

    width = width or shutil.get_terminal_size((100, 24)).columns
    columns = fitted_columns(rows, width)
    fixed = sum(w for _, key, w in columns if key != SHRINKABLE) + GAP * (len(columns) - 1)
    table = Table(box=None, padding=(0, GAP, 0, 0), pad_edge=False, show_edge=False, collapse_padding=True,
                  header_style="bold" if color else "")
    size_of = {}
    for title, key, natural in columns:
        size_of[key] = max(MIN_RUN_WIDTH, min(natural, width - fixed)) if key == SHRINKABLE else natural
        table.add_column(title, overflow="ellipsis", no_wrap=True, width=size_of[key])
    for row in rows:
        style = _style(str(row.get("decision"))) if color else None
        table.add_row(*(middle_cut(cell(row, key), size_of[key]) for _, key, _ in columns), style=style)
    out = io.StringIO()
    console = Console(file=out, width=width, force_terminal=color, no_color=not color, color_system="standard",
                      highlight=False, emoji=False, soft_wrap=False)
    console.print(table)
    dropped = [title for title, key in COLUMNS if key not in {c[1] for c in columns}]
    text = "\n".join(line.rstrip() for line in out.getvalue().splitlines()) + "\n"
    if dropped:
        note = f"(not shown at {width} columns: {', '.join(dropped)}; status --json has every field)"
        text += (note if len(note) <= width else "(more in: guarded-sbatch status --json)") + "\n"
    return text


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
