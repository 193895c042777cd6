"""On the real dev Slurm: a per-job sidecar follows its job through a requeue and leaves with it. The job-end
watch (an idle step in the job) ends at the requeue; once the job runs again the sidecar arms a new one, so the
job's end is noticed within a fast poll, not at the 5-minute scheduler poll or when the files go quiet."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import identity_scenarios as scenarios
from e2e_helpers import make_project, wait_for
from multinode_helpers import release, requeued, scontrol_job
from guarded_sbatch.scheduler.interface import JobState
from guarded_sbatch.scheduler.slurm import SlurmScheduler

pytestmark = pytest.mark.slurm


@pytest.fixture
def slurm(slurm_cluster: None, tmp_path: Path) -> SlurmScheduler:
    return SlurmScheduler(state_dir=tmp_path / "test-slurm-cache")


@pytest.mark.long  # a run that outlives a requeue
def test_a_sidecar_leaves_within_seconds_of_its_job_ending_after_a_requeue(slurm: SlurmScheduler, tmp_path: Path) -> None:
    # the default 5-minute scheduler poll: only the re-armed watch step can tell the end within seconds
    project = make_project(tmp_path, fast_interval=2.0, job_poll=300.0)
    project.env["GUARDED_SBATCH_BACKEND"] = "slurm"
    job_id, record, _ = scenarios.launch(project, "train.sh", "--logdir", "runs/requeued", "--steps", "1400")
    sidecar_id = record["sidecar_id"]
    wait_for(lambda: (scenarios.state_of(project, job_id).get("last_step") or 0) >= 20, 300, 1,
             "the sidecar to read the first steps")
    subprocess.run(["scontrol", "requeue", job_id], check=True, capture_output=True, timeout=30)
    wait_for(lambda: requeued(job_id), 60, 0.5, "the job to be back in the queue")
    release(job_id)
    wait_for(lambda: scontrol_job(job_id).get("JobState") == "RUNNING", 120, 1, "the requeued job to run again")

    wait_for(lambda: slurm.state(job_id).is_terminal, 300, 1, "the requeued run to end")
    wait_for(lambda: slurm.state(sidecar_id).is_terminal, 120, 1, "the sidecar to end")
    job, sidecar = slurm.info(job_id), slurm.info(sidecar_id)
    assert job.state is JobState.COMPLETED and sidecar.state is JobState.COMPLETED, (job, sidecar)
    assert job.end_time is not None and sidecar.end_time is not None
    # a fast poll (2 s), the last read and the exit: 1 s here; without the re-armed watch 47 s (the quiet files)
    assert 0 <= sidecar.end_time - job.end_time <= 15, (job.end_time, sidecar.end_time)
    output = project.sidecar_output(job_id)
    assert "Decision: STOP" not in output and output.count("ended COMPLETED") == 1, output[-3000:]
