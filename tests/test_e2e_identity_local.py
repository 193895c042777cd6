"""Issue 12 on the local backend: every sidecar watches exactly its own run; a new project launches clean."""

from __future__ import annotations

from pathlib import Path

import identity_scenarios as scenarios
from guarded_sbatch.scheduler.local import LocalScheduler


def _scheduler(tmp_path: Path) -> LocalScheduler:
    return LocalScheduler(tmp_path / "state" / "local-jobs")


def test_an_old_diverged_run_in_runs_is_not_this_runs(tmp_path: Path) -> None:
    scenarios.old_diverged_run_is_ignored(tmp_path, "local", _scheduler(tmp_path))


def test_two_concurrent_runs_in_one_project_stay_apart_and_kill_deletes_only_its_wandb_run(tmp_path: Path) -> None:
    scenarios.concurrent_runs_stay_apart(tmp_path, "local", _scheduler(tmp_path))


def test_a_new_project_launches_without_waivers(tmp_path: Path) -> None:
    scenarios.new_project_launches_clean(tmp_path, "local", _scheduler(tmp_path))


def test_a_restarted_run_keeps_reading_its_own_folder(tmp_path: Path) -> None:
    scenarios.restarted_run_keeps_its_own(tmp_path, "local", _scheduler(tmp_path))


def test_one_config_launched_twice_each_sidecar_reads_only_its_own_event_file(tmp_path: Path) -> None:
    scenarios.one_config_launched_twice(tmp_path, "local", _scheduler(tmp_path))
