"""A job array on the real dev Slurm, launched the README's way: four tasks of a tiny torch trainer, task 2 going
NaN at step 30, watched by ONE watcher job at the default cadence (tests/array_sweep.py says what is checked)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from array_sweep import check_sweep, launch_sweep, sweep_project, watcher_id
from e2e_helpers import wait_for
from guarded_sbatch.scheduler.slurm import SlurmScheduler

pytestmark = [pytest.mark.slurm, pytest.mark.long]


def test_one_watcher_stops_the_nan_task_alone_and_ends_with_the_array(slurm_cluster: None, tmp_path: Path) -> None:
    project = sweep_project(tmp_path)
    slurm = SlurmScheduler(state_dir=tmp_path / "test-cache")
    sweep = None
    try:
        sweep = launch_sweep(project, slurm)
        watcher = watcher_id(sweep)
        wait_for(lambda: slurm.state(watcher).is_terminal, 120, 2, "the watcher job to end")
        end = slurm.info(watcher).end_time
        assert end is not None
        check_sweep(sweep, slurm, end)
    finally:
        if sweep is not None:
            subprocess.run(["scancel", sweep.job], capture_output=True, timeout=30)
