"""A stranger's first hour, the stumbles left after issue 44, each played for real (the example trainer on the local
backend or the dev Slurm, screens read on an 80x24 pseudo-terminal): a STOP made by a foreground `monitor --job`
is the guard's STOP, for `status` and for the run's own sidecar alike."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from e2e_helpers import make_project, submitted_job_id, wait_for
from guarded_sbatch.scheduler.local import LocalScheduler
from test_first_hour_screens import TB, on_pty, rows, too_wide


def test_a_foreground_monitors_stop_is_the_guards_stop(tmp_path: Path) -> None:
    """The user watches the run in their terminal; the monitor judges it and stops it before the run's sidecar
    (polling every 60 s) looks again: `status` says the guard, and the sidecar's FINAL_SUMMARY names that stop."""
    project = make_project(tmp_path, fast_interval=60.0)
    job_id = submitted_job_id(project.cli("--guard-backend", "local", "--guard-tb", TB, "train.sh", "--steps", "3000",
                                          "--diverge-at", "400", "--step-seconds", "0.05", check=True).stdout)
    record = project.run_record(job_id)
    code, lines, _ = on_pty(project, "monitor", "--job", job_id, "--fast-interval", "1")
    shown = "\n".join(lines)
    assert code == 0 and "FINAL_SUMMARY" in shown and not too_wide(lines), shown
    assert re.search(rf"Action: job {job_id} cancelled", " ".join(shown.split())), shown

    row = rows(project)[job_id]
    assert (row["state"], row["stopped_by"], row["decision"]) == ("CANCELLED", "guard", "STOP"), row
    scheduler = LocalScheduler(project.state_dir / "local-jobs")
    wait_for(lambda: scheduler.state(record["sidecar_id"]).is_terminal, 240, what="the run's sidecar to end")
    summary = project.sidecar_output(job_id).split("FINAL_SUMMARY", 1)[-1]
    action = " ".join(next(line for line in summary.splitlines() if "Action:" in line).split())
    assert "nothing to stop" not in action and "guarded-sbatch monitor --job" in action, summary
    assert f"job {job_id} cancelled" in action, summary  # what the monitor's stop did, as it said it
    row = rows(project)[job_id]
    assert (row["stopped_by"], row["decision"]) == ("guard", "STOP") and row["evidence"], row
    assert json.loads(Path(row["evidence"]).read_text())["verdict"]["decision"] == "STOP"


def test_a_local_guard_stop_says_when_the_processes_ended(tmp_path: Path) -> None:
    """The local backend's STOP says, as the Slurm one does, when the job's processes ended after the stop: the end
    its supervisor measured, not a literal."""
    project = make_project(tmp_path, fast_interval=1.0)
    job_id = submitted_job_id(project.cli("--guard-backend", "local", "--guard-tb", TB, "train.sh", "--steps", "3000",
                                          "--diverge-at", "60", "--step-seconds", "0.03", check=True).stdout)
    record = project.run_record(job_id)
    scheduler = LocalScheduler(project.state_dir / "local-jobs")
    wait_for(lambda: scheduler.state(record["sidecar_id"]).is_terminal, 240, what="the run's sidecar to end")
    summary = " ".join(project.sidecar_output(job_id).split("FINAL_SUMMARY", 1)[-1].split())
    said = re.search(r"Action: job \S+ cancelled, now CANCELLED; its processes ended at (\d\d:\d\d:\d\d), "
                     r"(\d+\.\d) s after the stop", summary)
    assert said, summary
    info = scheduler.info(job_id)
    stop_at = json.loads((project.state_dir / "runs" / record["run_id"] / "sidecar-state.json").read_text())[
        "stop_requested_at"]
    assert info.end_time is not None and said.group(1) == time.strftime("%H:%M:%S", time.localtime(info.end_time))
    assert 0 <= float(said.group(2)) <= info.end_time - stop_at + 0.05, (said.groups(), info.end_time - stop_at)


def test_show_on_a_live_run_never_passes_an_old_report_off_as_now(tmp_path: Path) -> None:
    """A healthy run's guard reports in full at its first decisions, then every ~30 min: `show` while it runs says
    the step it judged now and the guard's latest check, and marks the last full report with its step and age."""
    project = make_project(tmp_path, fast_interval=1.0)
    job_id = submitted_job_id(project.cli("--guard-backend", "local", "--guard-tb", TB, "train.sh", "--steps", "4000",
                                          "--step-seconds", "0.05", check=True).stdout)
    try:
        def ahead() -> dict | None:
            view = json.loads(project.cli_here("show", job_id, "--json", check=True).stdout)
            moved = view["report_step"] is not None and (view["step_now"] or 0) > view["report_step"] + 40
            return view if moved and view["guard_latest"] else None

        view = wait_for(ahead, 180, 1, "the run to go on past the guard's last full report")
        assert view["state"] == "RUNNING" and view["report"].startswith("## Training Check"), view["report"]
        drawn = max(max(steps) for steps, _ in view["series"].values())
        assert drawn == view["step_now"], (drawn, view["step_now"])  # the plot and the text: one step

        text = project.cli_here("show", job_id, check=True).stdout
        now = int(re.search(r"judged now at step (\d+)", text).group(1))  # type: ignore[union-attr]
        title = re.search(r"last full report, from step (\d+), (?:less than 2|about \d+) min old "
                          r"\(the run is at step (\d+)", text)
        assert title and int(title.group(2)) == now > int(title.group(1)), text
        assert f"- Recent metrics: step {title.group(1)}" in text and text.index(title.group(0)) < text.index(
            "## Training Check"), text
        assert re.search(r"the guard's latest check at step \d+, \d+ (?:s|min) ago: CONTINUE", text), text
    finally:
        project.cli("kill", job_id, "--yes", timeout=180)
