"""`guarded-sbatch show RUN`: one run in the terminal, live or ended.

The run's state, its sidecar's latest report (and FINAL_SUMMARY), a plot of loss / eval / lr drawn in the
terminal (plotext; plain columns of numbers when stdout is not a terminal), the anomalies as judged now,
and the evidence paths. `--png FILE` writes the same curves as a PNG (matplotlib, in a child process so
the login path stays light), for a live run as much as for a stopped one.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import shutil
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from guarded_sbatch.actions.evidence_plot import (
    NONFINITE_KINDS, nonfinite_onsets, onset_label, plotted_keys, verdict_from_json,
)
from guarded_sbatch.cli.args import ArgumentParser
from guarded_sbatch.cli.array_lifecycle import array_tasks
from guarded_sbatch.cli.lifecycle import run_status_row
from guarded_sbatch.cli.status_table import render_table
from guarded_sbatch.core import door
from guarded_sbatch.core.errors import ExitCode, UsageError
from guarded_sbatch.core.extras import installed, missing_line, require
from guarded_sbatch.core.fsutil import read_json
from guarded_sbatch.core.jsonnum import dumps as json_dumps
from guarded_sbatch.core.sanitize import visible, visible_line
from guarded_sbatch.core.waiting import Waiting, fit
from guarded_sbatch.records.registry import RunRecord, find_run
from guarded_sbatch.judge.verdict import Decision, Reason, Verdict

PLAIN_ROWS = 12


def run_show(argv: list[str], *, out: TextIO | None = None) -> int:
    """`guarded-sbatch show RUN`: one run on the terminal (or as JSON, or with a PNG of its curves)."""
    parser = ArgumentParser(prog="guarded-sbatch show",
                            description="one run: latest report, curves, anomalies, evidence")
    parser.add_argument("run", help="run id, job id (an array task: J_T; an array: J lists its tasks) or run name "
                                    "(see `guarded-sbatch status`)")
    parser.add_argument("--png", type=Path, metavar="FILE", help="also write the curves as a PNG to FILE")
    parser.add_argument("--json", action="store_true", help="the same as one JSON object on stdout (no plot)")
    parser.add_argument("--plain", action="store_true", help="numbers instead of a terminal plot")
    args = parser.parse_args(argv)
    out = out or sys.stdout
    if args.png:
        require("matplotlib", "show --png")  # before any work: one line, exit 2
    tasks = array_tasks(args.run)
    if tasks:  # a job array: its tasks, one row each (each task is a run of its own: show J_T shows it)
        rows = [run_status_row(task) for task in tasks]
        if args.json:
            out.write(json_dumps({"array": args.run, "tasks": rows}, indent=2) + "\n")
        else:
            out.write(render_table(rows) + f"\n\nJob {args.run} is a job array of {len(tasks)} guarded tasks; show "
                      f"one with `guarded-sbatch show {tasks[0].job_id}`.\n")
        return int(ExitCode.OK)
    record = find_run(args.run)
    with Waiting(f"run {record.run_name}'s metrics to be read and judged, and its job's state"):  # a large run: seconds
        view = gather(record)
    if args.png:
        print(f"guarded-sbatch: drawing {args.png} (matplotlib, a few seconds)", file=sys.stderr, flush=True)
        with Waiting(f"the plot {args.png}", said=True):
            write_png(view, args.png)
    if args.json:
        out.write(json_dumps({k: v for k, v in view.items() if k not in ("verdict_obj",)}, indent=2) + "\n")
        return int(ExitCode.OK)
    terminal = bool(getattr(out, "isatty", lambda: False)())
    out.write(render(view, terminal=terminal, plain=args.plain,
                     color=terminal and not args.plain and "NO_COLOR" not in os.environ))
    if args.png:
        out.write(f"\nPlot written to {args.png}\n")
    return int(ExitCode.OK)


def gather(record: RunRecord) -> dict[str, Any]:
    """Everything show prints about a run: its status row, the curves by role, the verdict now, the evidence."""
    row = run_status_row(record)
    series, verdict, source = _judge_now(record)
    stop = _guard_stop_verdict(record, row)
    if stop is not None:  # the guard's STOP as it was taken (its step), never its own cancel judged afterwards
        verdict = stop
    elif verdict is not None and str(row["stopped_by"] or "").startswith("guard"):  # its evidence not written yet
        verdict = dataclasses.replace(verdict, anomalies=tuple(a for a in verdict.anomalies if a.kind != "interrupted"))
    # a key is a co-worker's text (a TensorBoard tag): its escapes, colours included, are shown, never obeyed (the
    # CLI's own output filter keeps colour codes for the tool's tags, so data is made visible here, at its source)
    series = {visible_line(key): value for key, value in series.items()}
    report = latest_report(record.folder)
    evidence_dir = record.evidence_dir
    evidence = sorted(str(p) for p in evidence_dir.iterdir()) if evidence_dir.is_dir() else []
    if not series:  # the metric files are gone: the curves the STOP kept
        series = _series_from_evidence(evidence_dir / "evidence.json")
    keys = (verdict.summary or {}).get("keys", {}) if verdict else {}
    plotted = plotted_keys(series, keys)  # by role: training loss, eval metric, lr, grad norm
    if not plotted:  # no key with a known role: the first few series there are
        plotted = {key: key for key in list(series)[:3]}
    return {
        "run": record.run_name, "run_id": record.run_id, "job_id": record.job_id, "state": row["state"],
        "stopped_by": row["stopped_by"], "age": row["age"], "elapsed": row["elapsed"], "exit_code": row["exit_code"],
        "exit": row["exit"],
        "decision_now": verdict.decision.value if verdict else None,
        "unguarded": bool(verdict and verdict.reason is Reason.UNGUARDED),
        "reason_now": visible(verdict.message) if verdict else None,
        "anomalies": [visible(_anomaly_text(a, series)) for a in verdict.anomalies] if verdict else [],
        "guard_stop_step": stop.last_step if stop is not None else None,
        "step_now": verdict.last_step if verdict else None, "guard_latest": guard_latest(record),
        "source": visible(source), "report": visible(report), "report_step": report_step(report),
        "report_age_s": report_age(report),
        "series": {key: series[key] for key in plotted.values()},
        "plotted": plotted, "evidence": evidence, "folder": str(record.folder), "verdict_obj": verdict,
    }


def _judge_now(record: RunRecord) -> tuple[dict[str, tuple[list[int], list[float]]], Any, str]:
    """The run judged now on its recorded sources (the ones its sidecar reads), never on a rediscovery."""
    from guarded_sbatch.cli.sidecar_job import load_watcher

    load_watcher()  # the readers and numpy (one OpenBLAS thread): here, not for `show --help` or an array's table
    from guarded_sbatch.judge.policy import RunContext
    from guarded_sbatch.sidecar.one_shot import judge_sources, read_whole_run, with_note
    from guarded_sbatch.sidecar.plan import plan_of
    from guarded_sbatch.sidecar.source_set import SourceSet
    from guarded_sbatch.sidecar.unguarded_time import recorded_verdict

    plan = plan_of(record, record.folder)  # as its sidecar judges it: the same plan from the same record
    sources = SourceSet(plan, None, live=False)
    unread = read_whole_run(sources)  # the whole run, not the first poll's worth
    verdict = with_note(judge_sources(sources, plan.policy, RunContext(job_live=False)), unread)
    verdict = recorded_verdict(record, sources, verdict, time.time())  # no judged loss for minutes: UNGUARDED
    history = sources.history()
    series = {}
    for key in history.keys():
        steps, values = history.series(key)
        series[key] = ([int(s) for s in steps], [float(v) for v in values])
    return series, verdict, sources.describe()


def _series_from_evidence(path: Path) -> dict[str, tuple[list[int], list[float]]]:
    raw = read_json(path)
    if not isinstance(raw, dict):
        return {}
    return {key: (list(entry["steps"]), [float(v) for v in entry["values"]])  # "NaN" and "Infinity" parse
            for key, entry in (raw.get("recent_metrics") or {}).items()}


def _guard_stop_verdict(record: RunRecord, row: dict[str, Any]) -> Verdict | None:
    """The verdict the guard stopped the run on (evidence.json's), when the guard stopped it."""
    if not str(row.get("stopped_by") or "").startswith("guard"):
        return None
    raw = read_json(record.evidence_dir / "evidence.json")
    try:
        verdict = verdict_from_json(raw["verdict"]) if isinstance(raw, dict) else None
    except (KeyError, TypeError, ValueError):
        return None
    return verdict if verdict is not None and verdict.decision is Decision.STOP else None


def _anomaly_text(anomaly: Any, series: dict[str, tuple[list[int], list[float]]]) -> str:
    """An anomaly in words; a non-finite one by the first value its series holds that is not a number (the spelling
    and step the plots mark: actions/evidence_plot.nonfinite_onsets)."""
    onsets = nonfinite_onsets(*series[anomaly.metric]) if anomaly.kind in NONFINITE_KINDS and \
        anomaly.metric in series else []
    where = f"not finite in {anomaly.metric}: {onset_label(*onsets[0])}" if onsets else \
        f"{anomaly.kind} in {anomaly.metric} at step {anomaly.step}"
    return where + (f" ({anomaly.message})" if anomaly.message else "")


REPORT_BYTES = 16 << 20  # the end of each sidecar output: its last report and FINAL_SUMMARY


def latest_report(folder: Path) -> str:
    """The sidecar's last full report block, and its FINAL_SUMMARY when there is one."""
    outputs = sorted(folder.glob("sidecar-*.out"), key=lambda p: p.stat().st_mtime)
    lines = "".join(door.read(p, REPORT_BYTES, tail=True).text("replace") for p in outputs).splitlines()
    final = _block(lines, "FINAL_SUMMARY")  # an ended run: its summary says it all (the last report repeats it)
    return final or _block(lines, "## Training Check")


def guard_latest(record: RunRecord) -> dict[str, Any] | None:
    """The sidecar's newest decision, from its state (saved at every poll, so its time is the last check's): what
    the guard thinks now, newer than its last full report."""
    raw = read_json(record.sidecar_state_file)
    if not isinstance(raw, dict) or not raw.get("last_decision"):
        return None
    try:
        checked = record.sidecar_state_file.stat().st_mtime
    except OSError:
        return None
    return {"decision": str(raw["last_decision"]), "reason": str(raw.get("last_reason") or ""),
            "step": raw.get("last_step"), "checked_at": checked, "age_s": max(0.0, time.time() - checked)}


def report_step(report: str) -> int | None:
    """The step a report block (or FINAL_SUMMARY) was made at."""
    found = re.search(r"^- (?:Recent metrics: step|Last step:) (\d+)", report, re.MULTILINE)
    return int(found.group(1)) if found else None


def report_age(report: str) -> float | None:
    """Seconds since a report block's header time (`## Training Check - 2026-12-06 23:16 UTC`, local time)."""
    found = re.search(r"^## Training Check - (\d{4}-\d\d-\d\d \d\d:\d\d)", report, re.MULTILINE)
    if not found:
        return None
    return max(0.0, time.time() - datetime.strptime(found.group(1), "%Y-%m-%d %H:%M").timestamp())


def _block(lines: list[str], marker: str) -> str:
    starts = [i for i, line in enumerate(lines) if line.startswith(marker)]
    if not starts:
        return ""
    block = [lines[starts[-1]]]
    for line in lines[starts[-1] + 1:]:
        if line.startswith("- "):
            block.append(line)
        elif line.strip() or len(block) > 1:
            break
    return "\n".join(block)


def render(view: dict[str, Any], *, terminal: bool, color: bool, plain: bool = False) -> str:
    """The view as text: panels on a terminal, columns of numbers when piped or `plain` (wrapped to a terminal)."""
    head = [f"# {view['run']} (job {view['job_id']}): {view['state']}"
            + (f", stopped by {view['stopped_by']}" if view["stopped_by"] else "")
            + (f", exit {view['exit']}" if view.get("exit") else ""),
            f"age {view['age'] or '-'}, ran {view['elapsed'] or '-'}; metrics: {view['source']}",
            _judged_line(view), ""]
    width = shutil.get_terminal_size((100, 40)).columns - 1 if terminal else None
    parts = [_fit("\n".join(head), width)]
    parts.append(_fit(_report_title(view) + (view["report"] or "(no sidecar report yet)"), width))
    curves = plot_terminal(view, color=color) if terminal and not plain else plot_plain(view)
    parts.append(curves)
    if width is not None:  # anomalies one line each, cut to the terminal's width; the rest wrapped to it
        parts.append("\n".join(["Anomalies: " + ("" if view["anomalies"] else "none")]
                               + [_cut(f"  - {a}", width) for a in view["anomalies"]]))
        names = ", ".join(Path(p).name for p in view["evidence"])
        parts.append(_fit(f"Evidence: {names or _no_evidence(view)}\nRun folder (evidence/ inside): {view['folder']}",
                          width))
    else:
        parts.append("Anomalies: " + ("; ".join(view["anomalies"]) or "none"))
        parts.append("Evidence: " + (", ".join(view["evidence"]) or _no_evidence(view)) + f"\nRun folder: {view['folder']}")
    return "\n\n".join(p.rstrip() for p in parts if p) + "\n"


def _judged_line(view: dict[str, Any]) -> str:
    if view.get("guard_stop_step") is not None:
        return f"the guard's STOP at step {view['guard_stop_step']}: {view['reason_now'] or '-'}"
    at = f" at step {view['step_now']}" if view.get("step_now") is not None else ""
    line = f"judged now{at}: {'UNGUARDED' if view.get('unguarded') else view['decision_now'] or '-'}: " \
        f"{view['reason_now'] or '-'}"
    guard = view.get("guard_latest")
    if guard and not view["report"].startswith("FINAL_SUMMARY"):
        step = f" at step {guard['step']}" if guard.get("step") is not None else ""
        line += (f"\nthe guard's latest check{step}, {_ago(guard['age_s'])} ago: {guard['decision']} "
                 f"{guard['reason']}")
    return line


def _report_title(view: dict[str, Any]) -> str:
    """A line over the last full report when it is older than the run's newest step: its step and age, so an old
    report never reads as the run now (a full report comes every ~30 min or at a change; the lines above are now)."""
    step, now = view.get("report_step"), view.get("step_now")
    if not view["report"].startswith("## Training Check") or step is None or now is None or step >= now:
        return ""
    age = view.get("report_age_s")
    # its header's time is to the minute
    old = "" if age is None else ", less than 2 min old" if age < 120 else f", about {_ago(age)} old"
    return f"The guard's last full report, from step {step}{old} (the run is at step {now} now, above):\n"


def _ago(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds} s" if seconds < 120 else (f"{seconds // 60} min" if seconds < 7200 else f"{seconds // 3600} h")


def _no_evidence(view: dict[str, Any]) -> str:
    """What no evidence means: a guard keeps evidence only when it stops a run."""
    if view["state"] in ("PENDING", "RUNNING", "REQUEUED", "COMPLETING", "SUSPENDED", "UNKNOWN"):
        return "none yet (the guard keeps evidence when it stops a run)"
    if str(view.get("stopped_by") or "").startswith("guard"):
        return "none yet (the guard is writing it)"
    if view["decision_now"] == "CONTINUE":
        return f"none: the run ended {view['state']} healthy, the guard had nothing to stop"
    return f"none: the run ended {view['state']} without a STOP by its guard"


def plot_terminal(view: dict[str, Any], *, color: bool) -> str:
    """The curves as terminal panels (cli/show_plot.py); without plotext, the columns of numbers and a line saying
    what draws them."""
    if not installed("plotext"):
        return plot_plain(view) + "\n(" + missing_line("plotext", "drawing the curves") + ")"
    from guarded_sbatch.cli.show_plot import draw_panels  # plotext: only `show` on a terminal draws

    verdict = view.get("verdict_obj")
    return draw_panels(view["plotted"], view["series"], verdict.anomalies if verdict else (), color=color)


def plot_plain(view: dict[str, Any]) -> str:
    """Columns of numbers for a pipe: the last PLAIN_ROWS steps of each plotted key."""
    lines = []
    for label, key in view["plotted"].items():
        if key not in view["series"]:
            continue
        steps, values = view["series"][key]
        picked = list(zip(steps, values))[-PLAIN_ROWS:]
        lines.append(f"{key} ({label}), last {len(picked)} of {len(steps)} points:")
        lines.extend(f"  step {s:>8}  {_number(v)}" for s, v in picked)
    return "\n".join(lines) or "(no metrics yet)"


def _fit(text: str, width: int | None) -> str:
    """Each line wrapped to a terminal's width (a report's `- Key: value` lines go on indented); a pipe's as is."""
    return fit(text, None if width is None else max(width, 40))


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _number(value: float) -> str:
    if math.isfinite(value):
        return f"{value:.6g}"
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def write_png(view: dict[str, Any], path: Path) -> None:
    """The curves as a PNG at path, drawn in a child process (actions/evidence_plot.py)."""
    from guarded_sbatch.actions.evidence import plot_in_subprocess

    verdict = view["verdict_obj"] or Verdict(Decision.WAIT, Reason.NO_DATA, "")
    if not view["series"]:
        raise UsageError(f"run {view['run_id']} has no metrics to plot yet; try again once it has logged some")
    path = Path(os.path.abspath(path.expanduser()))  # never resolved: a link planted at FILE is refused, not followed
    door.make_dirs(path.parent)
    with door.private_temp_dir("guarded-sbatch-show-") as folder:
        try:
            plot_in_subprocess(folder, path, view["series"], verdict, run_name=view["run"])
        except RuntimeError as exc:
            raise UsageError(f"could not write {path}: {exc}") from None
