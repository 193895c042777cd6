"""The first vertical slice on the real dev Slurm: guarded-sbatch → training job + sidecar →
the sidecar reads TensorBoard events → STOP on a non-finite loss → scancel → evidence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from e2e_helpers import make_project, submitted_job_id, wait_for
from guarded_sbatch.scheduler.interface import JobState
from guarded_sbatch.scheduler.slurm import SlurmScheduler

pytestmark = pytest.mark.slurm
TB = "runs/synthetic-tanh-mlp-bs64-lr5e-2"


@pytest.fixture
def slurm(slurm_cluster: None, tmp_path: Path) -> SlurmScheduler:
    return SlurmScheduler(state_dir=tmp_path / "test-slurm-cache")


def test_diverging_run_ends_cancelled_by_the_sidecar(slurm: SlurmScheduler, tmp_path: Path) -> None:
    project = make_project(tmp_path)
    result = project.cli("--guard-backend", "slurm", "--guard-tb", TB, "train.sh", "--steps", "4000",
                         "--diverge-at", "60")
    assert result.returncode == 0, result.stderr
    job_id = submitted_job_id(result.stdout)
    assert result.stdout.strip() == f"Submitted batch job {job_id}"
    record = project.run_record(job_id)
    sidecar_id = record["sidecar_id"]
    assert wait_for(lambda: slurm.state(job_id).is_terminal, 150, 1, "training job to end")
    assert slurm.state(job_id) is JobState.CANCELLED
    assert wait_for(lambda: slurm.state(sidecar_id).is_terminal, 90, 1, "sidecar to end")
    sidecar = slurm.info(sidecar_id)
    assert sidecar.state is JobState.COMPLETED and sidecar.exit_code == 0, sidecar
    output = project.sidecar_output(job_id)
    assert "FINAL_SUMMARY" in output and "- Decision: STOP" in output and f"job {job_id} cancelled" in output
    evidence = project.state_dir / "runs" / record["run_id"] / "evidence" / "evidence.json"
    assert json.loads(evidence.read_text())["verdict"]["decision"] == "STOP"


def test_healthy_run_completes_and_its_sidecar_is_gone_within_60_s(slurm: SlurmScheduler, tmp_path: Path) -> None:
    # default scheduler-poll interval (300 s): the sidecar must notice the end through its watch step
    project = make_project(tmp_path, fast_interval=5.0, job_poll=300.0)
    result = project.cli("--guard-backend", "slurm", "--guard-tb", TB, "train.sh", "--steps", "300",
                         "--step-seconds", "0.03")
    assert result.returncode == 0, result.stderr
    job_id = submitted_job_id(result.stdout)
    sidecar_id = project.run_record(job_id)["sidecar_id"]
    assert wait_for(lambda: slurm.state(job_id).is_terminal, 120, 1, "training job to end")
    training = slurm.info(job_id)
    assert training.state is JobState.COMPLETED
    assert wait_for(lambda: slurm.state(sidecar_id).is_terminal, 75, 1, "sidecar to end")
    sidecar = slurm.info(sidecar_id)
    assert sidecar.state is JobState.COMPLETED
    assert training.end_time is not None and sidecar.end_time is not None
    assert sidecar.end_time - training.end_time <= 60
    output = project.sidecar_output(job_id)
    assert "Decision: STOP" not in output and "ended COMPLETED" in output


def test_rejected_option_shows_sbatchs_own_message(slurm: SlurmScheduler, tmp_path: Path) -> None:
    project = make_project(tmp_path)
    result = project.cli("--guard-backend", "slurm", "--partition", "no-such-partition", "train.sh")
    assert result.returncode == 4, result.stderr
    assert result.stdout == ""
    errors = [line for line in result.stderr.splitlines() if line.startswith("guarded-sbatch: error")]
    assert len(errors) == 1 and "invalid partition" in errors[0].lower() and "Traceback" not in result.stderr


@pytest.mark.serial
def test_slurmctld_down_gives_one_clear_line(slurm: SlurmScheduler, tmp_path: Path) -> None:
    import subprocess

    from e2e_helpers import REPO

    project = make_project(tmp_path)
    subprocess.run([str(REPO / "scripts" / "dev-slurm"), "stop-ctld"], check=True, timeout=60, capture_output=True)
    try:
        result = project.cli("--guard-backend", "slurm", "train.sh", timeout=180)
    finally:
        subprocess.run([str(REPO / "scripts" / "dev-slurm"), "start-ctld"], check=True, timeout=120, capture_output=True)
    assert result.returncode == 4, result.stderr
    assert result.stdout == ""
    errors = [line for line in result.stderr.splitlines() if line.startswith("guarded-sbatch: error")]
    assert len(errors) == 1 and "slurmctld is not answering" in errors[0], result.stderr
    assert "Traceback" not in result.stderr
