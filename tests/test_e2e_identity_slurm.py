"""Issue 12 on the real dev Slurm: every sidecar watches exactly its own run; a new project launches clean."""

from __future__ import annotations

from pathlib import Path

import identity_scenarios as scenarios
import pytest
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
