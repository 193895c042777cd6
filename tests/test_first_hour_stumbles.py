"""A stranger's first hour, the stumbles left after issue 44, each played for real (the example trainer on the local
backend or the dev Slurm, screens read on an 80x24 pseudo-terminal): a STOP made by a foreground `monitor --job`
is the guard's STOP, for `status` and for the run's own sidecar alike."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest

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


@pytest.mark.slurm
@pytest.mark.waits
def test_an_array_task_the_guard_stopped_never_shows_a_clean_exit(slurm_cluster: None, tmp_path: Path) -> None:
    """The lr sweep with its trainer under `srun` (a step, as most clusters run one): the guard ends the NaN task's
    step, then cancels the task. Once slurmctld has forgotten it, sacct's line of the task says 0:0 and its `.batch`
    line how it ended: `status` and a stranger's scheduler (nothing remembered) say the latter, never 0:0."""
    from array_sweep import NAN_AT, NAN_TASK, STEP_S, sweep_project
    from guarded_sbatch.scheduler import get_scheduler
    from guarded_sbatch.scheduler.slurm_parse import parse_exit_code

    project = sweep_project(tmp_path)
    script = project.root / "train.sh"
    text = script.read_text().replace("#SBATCH --array=0-3", f"#SBATCH --array={NAN_TASK - 1}-{NAN_TASK}")
    script.write_text(text.replace("\npython train.py", "\nsrun python train.py"))
    launched = project.cli("train.sh", "--nan-task", str(NAN_TASK), "--nan-at", str(NAN_AT), "--steps", "600",
                           "--step-seconds", str(STEP_S), timeout=180)
    assert launched.returncode == 0, launched.stderr
    stopped = f"{submitted_job_id(launched.stdout)}_{NAN_TASK}"
    slurm = get_scheduler("slurm", state_dir=tmp_path / "asker")
    try:
        wait_for(lambda: slurm.state(stopped).is_terminal, 300, 2, "the guard to stop the NaN task")
        wait_for(lambda: subprocess.run(["scontrol", "-o", "show", "job", stopped], capture_output=True,
                                        timeout=30).returncode != 0, 240, 2, "slurmctld to forget the task")

        def batch_line() -> str | None:
            out = subprocess.run(["sacct", "-n", "-P", "-j", stopped, "-o", "JobID,ExitCode,State"], capture_output=True,
                                 text=True, timeout=60, check=True).stdout
            return next((line for line in out.splitlines() if line.startswith(f"{stopped}.batch|")), None)

        batch = wait_for(batch_line, 120, 2, "sacct's .batch line of the task").split("|")[1]
        stranger = get_scheduler("slurm", state_dir=tmp_path / "stranger")  # sacct alone
        assert stranger.info(stopped).exit_code == parse_exit_code(batch) != 0, batch
        row = rows(project)[stopped]
        assert (row["state"], row["stopped_by"]) == ("CANCELLED", "guard") and row["exit"] not in (None, "0:0"), row
    finally:
        subprocess.run(["scancel", stopped.split("_")[0]], timeout=60, check=False)


def test_a_stop_by_another_watcher_that_did_not_take_is_dropped_and_the_run_guarded_again(tmp_path: Path) -> None:
    """The run's sidecar takes in a monitor's STOP from the run's state; if the job still runs long after it, the
    claim is dropped there (never taken in again) and the sidecar judges, and stops, the run itself."""
    from guarded_sbatch.sidecar.plan import WatchPlan
    from guarded_sbatch.sidecar.state import SidecarState, share_stop
    from guarded_sbatch.sidecar.stop_record import OTHER_STOP_S, stop_of_another

    path = tmp_path / "sidecar-state.json"
    mine = SidecarState(checks=3)
    mine.save(path)
    monitor = SidecarState(stop_requested_at=1000.0, last_decision="STOP", last_reason="divergence", last_step=7)
    share_stop(path, monitor, "`guarded-sbatch monitor --job 9`")
    mine.save(path)  # the sidecar's next poll takes it in
    assert (mine.stop_by, mine.last_decision, mine.last_step, mine.checks) == (
        "`guarded-sbatch monitor --job 9`", "STOP", 7, 3)
    plan = WatchPlan(run_name="r", job_id="9", state_file=path, evidence_dir=tmp_path / "evidence")
    said: list[str] = []
    assert stop_of_another(plan, mine, False, 1000.0 + 5, lambda text, level: said.append(text)) is None
    assert mine.stop_by and not said  # under way
    told = stop_of_another(plan, mine, True, 1000.0 + 5, lambda text, level: said.append(text))
    assert told is None  # ended, but the monitor has not said what its stop did yet
    assert stop_of_another(plan, mine, False, 1000.0 + OTHER_STOP_S, lambda text, level: said.append(text)) is None
    assert said and not mine.stop_by and not mine.stop_requested_at
    mine.save(path)
    assert not SidecarState.load(path).stop_by and not mine.stop_by  # not taken in again
