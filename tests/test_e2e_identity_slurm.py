"""Issue 12 on the real dev Slurm: every sidecar watches exactly its own run; a new project launches clean."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import identity_scenarios as scenarios
import pytest
from e2e_helpers import wait_for
from guarded_sbatch.scheduler.interface import JobState
from guarded_sbatch.scheduler.slurm import SlurmScheduler

pytestmark = pytest.mark.slurm


@pytest.fixture
def slurm(slurm_cluster: None, tmp_path: Path) -> SlurmScheduler:
    return SlurmScheduler(state_dir=tmp_path / "test-slurm-cache")


def test_an_old_diverged_run_in_runs_is_not_this_runs(slurm: SlurmScheduler, tmp_path: Path) -> None:
    scenarios.old_diverged_run_is_ignored(tmp_path, "slurm", slurm)


def test_two_concurrent_runs_in_one_project_stay_apart_and_kill_deletes_only_its_wandb_run(
        slurm: SlurmScheduler, tmp_path: Path) -> None:
    scenarios.concurrent_runs_stay_apart(tmp_path, "slurm", slurm)


@pytest.mark.long  # a run that outlives a requeue
def test_a_requeued_run_keeps_reading_its_own_folder_and_wandb_run(slurm: SlurmScheduler, tmp_path: Path) -> None:
    scenarios.requeued_run_keeps_its_own(tmp_path, slurm)


def test_a_new_project_launches_without_waivers(slurm: SlurmScheduler, tmp_path: Path) -> None:
    scenarios.new_project_launches_clean(tmp_path, "slurm", slurm)


def test_one_config_launched_twice_each_sidecar_reads_only_its_own_event_file(
        slurm: SlurmScheduler, tmp_path: Path) -> None:
    scenarios.one_config_launched_twice(tmp_path, "slurm", slurm)


def test_a_process_of_another_cluster_with_this_jobs_id_is_not_this_runs(slurm: SlurmScheduler, tmp_path: Path) -> None:
    """Job ids are a cluster's own: a local-backend job that happens to carry the same SLURM_JOB_ID (here started by
    hand beside the held job: a NaN run whose W&B file its wandb service holds open elsewhere) is another job's,
    never read as this run's (it was, where every dev cluster and local job share one process table: a Slurm
    job's sidecar judged a local job's W&B run)."""
    project = scenarios.identity_project(tmp_path, "slurm")
    job_id, record, _ = scenarios.launch(project, "--hold", "--job-name", "synthetic-tanh-mlp-bs64-lr5e-2-idclash",
                                         "train.sh", "--logdir", "runs/mine", "--steps", "400")
    impostor_dir = tmp_path / "elsewhere"
    impostor_dir.mkdir()
    env = {**project.env, **scenarios.WANDB_ENV, "WANDB_DIR": str(impostor_dir), "SLURM_JOB_ID": job_id,
           "SLURM_JOBID": job_id, "SLURM_CLUSTER_NAME": "local"}
    impostor = subprocess.Popen(
        [sys.executable, str(project.root / "train.py"), "--config", str(project.root / scenarios.CONFIG),
         "--logdir", str(impostor_dir / "runs" / "impostor"), "--nan-at", "20", "--steps", "100000", "--wandb"],
        cwd=impostor_dir, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: any(impostor_dir.glob("wandb/offline-run-*/run-*.wandb")), 90, 0.5,
                        "the impostor's W&B run")
        subprocess.run(["scontrol", "release", job_id], check=True, capture_output=True, timeout=30)
        state, output = scenarios.wait_ended(project, slurm, job_id)
    finally:
        impostor.kill()
        impostor.wait(timeout=30)
    assert state is JobState.COMPLETED and "Decision: STOP" not in output, output
    assert "impostor" not in output and "ended COMPLETED" in output, output
    scenarios.assert_cites_only_its_own(project, job_id, output)
