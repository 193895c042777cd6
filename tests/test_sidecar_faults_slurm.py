"""The sidecar under faults on the real dev Slurm: a controller restart, its own requeue, the
metrics folder gone for a while, a notes file it cannot write. Each run is a guarded launch of the
tiny_mlp example through the CLI (a real training job and a real sidecar job)."""

from __future__ import annotations

import math
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from e2e_helpers import REPO, Project, make_project, submitted_job_id, wait_for
from guarded_sbatch.scheduler.interface import JobState
from guarded_sbatch.scheduler.slurm import SlurmScheduler
from guarded_sbatch.sidecar.state import SidecarState
from guarded_sbatch.sources.tensorboard import TensorBoardSource

pytestmark = pytest.mark.slurm
TB = "runs/synthetic-tanh-mlp-bs64-lr5e-2"


@pytest.fixture
def slurm(slurm_cluster: None, tmp_path: Path) -> SlurmScheduler:
    return SlurmScheduler(state_dir=tmp_path / "test-slurm-cache")


def launch(project: Project, *args: str, tb: str = TB) -> tuple[str, str, Path]:
    """Launch a guarded run; return (training job id, sidecar job id, the run's state folder)."""
    name = f"synthetic-tanh-mlp-bs64-lr5e-2-{uuid.uuid4().hex[:6]}"  # unique on the shared dev Slurm
    result = project.cli("--guard-backend", "slurm", "--guard-tb", tb, "--job-name", name, *args)
    assert result.returncode == 0, result.stderr
    job_id = submitted_job_id(result.stdout)
    record = project.run_record(job_id)
    return job_id, record["sidecar_id"], project.state_dir / "runs" / record["run_id"]


def reports_in(project: Project, job_id: str) -> list[str]:
    return [line.split(": ", 1)[1] for line in project.sidecar_output(job_id).splitlines()
            if line.startswith("- Decision:")]


def dev_slurm(*args: str) -> None:
    subprocess.run([str(REPO / "scripts" / "dev-slurm"), *args], check=True, timeout=120,
                   capture_output=True, text=True)


def first_broken_wall_time(project: Project, from_step: int) -> float:
    """Wall time of the trainer's first event at or after the step where it was made to diverge."""
    points = TensorBoardSource(project.root / TB).read_new()
    return min(p.wall_time for p in points if p.key == "train/loss" and p.step >= from_step)


@pytest.mark.serial
def test_controller_restart_is_ridden_out_and_the_sidecar_still_ends_with_the_job(
    slurm: SlurmScheduler, tmp_path: Path
) -> None:
    # the sidecar asks about the job at every poll here, so it meets the controller while it is down
    project = make_project(tmp_path, fast_interval=2.0, job_poll=2.0)
    job_id, sidecar_id, run_dir = launch(project, "train.sh", "--steps", "1500", "--step-seconds", "0.03")
    wait_for(lambda: reports_in(project, job_id), 120, 1, "the sidecar's first report")
    try:
        dev_slurm("stop-ctld")
        down_at = time.time()
        time.sleep(12)  # a restart that takes a while
    finally:
        dev_slurm("start-ctld")
        up_at = time.time()
    assert wait_for(lambda: slurm.state(job_id).is_terminal, 150, 1, "training job to end")
    training = slurm.info(job_id)
    assert training.state is JobState.COMPLETED  # nothing was stopped during the outage
    assert wait_for(lambda: slurm.state(sidecar_id).is_terminal, 75, 1, "sidecar to end")
    sidecar = slurm.info(sidecar_id)
    assert sidecar.state is JobState.COMPLETED and sidecar.exit_code == 0
    assert training.end_time is not None and sidecar.end_time is not None
    assert sidecar.end_time - training.end_time <= 60
    output = project.sidecar_output(job_id)
    # the sidecar met the outage: squeue either failed (UNKNOWN, said so) or waited for the new controller
    polls = SidecarState.load(run_dir / "sidecar-state.json").job_polls
    blocked = any(b - a >= 8 and a <= up_at and b >= down_at for a, b in zip(polls, polls[1:]))
    assert blocked or ("could not tell the state of job" in output and "answers again" in output), polls
    assert set(reports_in(project, job_id)) <= {"CONTINUE", "WAIT"}
    assert "FINAL_SUMMARY" not in output and f"training job {job_id} ended COMPLETED" in output


@pytest.mark.long  # a run that outlives its sidecar's requeue
def test_requeued_sidecar_resumes_the_same_run_and_still_stops_a_later_nan(
    slurm: SlurmScheduler, tmp_path: Path
) -> None:
    project = make_project(tmp_path, fast_interval=2.0, job_poll=10.0)
    job_id, sidecar_id, run_dir = launch(project, "train.sh", "--steps", "4000", "--step-seconds", "0.03",
                                         "--diverge-at", "1500")
    wait_for(lambda: reports_in(project, job_id), 120, 1, "the sidecar's first report")
    # the state is saved just after the report is printed: wait for it, never assume the order
    before = wait_for(lambda: (s := SidecarState.load(run_dir / "sidecar-state.json")).checks > 0 and s,
                      30, 0.2, "the sidecar's state after its first report")
    assert before.restarts == 0
    subprocess.run(["scontrol", "requeue", sidecar_id], check=True, timeout=30)
    # Slurm holds a requeued batch job for ~2 min (BeginTime); release it sooner, as an admin could.
    # Not at once: a start in the same second as the requeue is refused ("Job credential revoked")
    wait_for(lambda: slurm.state(sidecar_id) in (JobState.PENDING, JobState.REQUEUED), 30, 0.5, "requeue")
    subprocess.run(["scontrol", "update", f"jobid={sidecar_id}", "StartTime=now+5"], check=True, timeout=30)
    assert wait_for(lambda: slurm.state(job_id).is_terminal, 150, 1, "training job to end")
    assert slurm.state(job_id) is JobState.CANCELLED
    assert wait_for(lambda: slurm.state(sidecar_id).is_terminal, 90, 1, "sidecar to end")
    assert slurm.info(sidecar_id).state is JobState.COMPLETED
    output = project.sidecar_output(job_id)
    assert "sidecar: resuming (restart 1)" in output
    assert output.count("FINAL_SUMMARY") == 1 and f"job {job_id} cancelled" in output
    after = SidecarState.load(run_dir / "sidecar-state.json")
    assert after.restarts == 1 and after.finished and after.last_decision == "STOP"
    assert after.started_at == before.started_at and after.checks > before.checks  # the same run, carried on
    assert Path(after.evidence).is_relative_to(run_dir)


@pytest.mark.waits  # a run to its NaN, a source away and back, at the sidecar's cadence
def test_vanished_metrics_wait_then_a_nan_is_stopped_at_the_next_fast_poll_even_without_notes(
    slurm: SlurmScheduler, tmp_path: Path
) -> None:
    blocker = tmp_path / "notes-blocker"
    blocker.write_text("a file where the notes folder should be (root ignores chmod)\n", encoding="utf-8")
    notes = blocker / "NOTES.md"
    project = make_project(tmp_path, fast_interval=2.0, job_poll=10.0)
    diverge_at = 1500
    # the sidecar reads the events through a link (a mount alias, say); the link goes away for a
    # while. The trainer writes to the real folder (tensorboard's writer reopens its file by path
    # at every record, so taking the real folder away would kill the trainer instead)
    link = tmp_path / "events-link"
    link.symlink_to(project.root / TB, target_is_directory=True)
    launch_args = ["--guard-notes", str(notes), "train.sh", "--steps", "4000", "--step-seconds", "0.03",
                   "--diverge-at", str(diverge_at)]
    job_id, sidecar_id, run_dir = launch(project, *launch_args, tb=str(link))
    wait_for(lambda: reports_in(project, job_id), 120, 1, "the sidecar's first report")
    link.unlink()
    try:
        wait_for(lambda: "source_unreadable" in project.sidecar_output(job_id), 30, 0.5, "WAIT (unreadable)")
    finally:
        link.symlink_to(project.root / TB, target_is_directory=True)
    # the reports as they stood when CONTINUE came back (a later report may already be the next WAIT)
    seen = wait_for(lambda: (r := reports_in(project, job_id))[-1] == "CONTINUE" and r, 30, 0.5,
                    "CONTINUE once readable again")
    assert seen[-2:] == ["WAIT", "CONTINUE"], seen
    assert wait_for(lambda: slurm.state(job_id).is_terminal, 150, 1, "training job to end")
    training = slurm.info(job_id)
    assert training.state is JobState.CANCELLED
    assert wait_for(lambda: slurm.state(sidecar_id).is_terminal, 90, 1, "sidecar to end")
    output = project.sidecar_output(job_id)
    summary = output[output.index("FINAL_SUMMARY"):]
    # the FINAL_SUMMARY goes out first (a note is a file others may lock); the note's failure follows it
    note_line = next(line for line in summary.splitlines() if line.startswith("sidecar: project note:"))
    assert "FAILED" in note_line and str(blocker) in note_line
    assert f"job {job_id} cancelled" in summary
    # the fast path: the full report was not due for minutes, yet the cancel came within seconds
    state = SidecarState.load(run_dir / "sidecar-state.json")
    broken_at = first_broken_wall_time(project, diverge_at)
    assert training.end_time is not None and math.isfinite(broken_at)
    assert training.end_time - broken_at <= 30, (training.end_time, broken_at)  # flush 5 s + poll 2 s + cancel
    assert state.next_full_report_at - training.end_time > 60
