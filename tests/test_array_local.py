"""The same job array on the local backend (a laptop rehearsing its sweep): four tasks of a tiny torch trainer, task 2
going NaN at step 30, watched by ONE watcher job at the default cadence (tests/array_sweep.py says what is checked)."""

from __future__ import annotations

from pathlib import Path

import pytest

from array_sweep import check_sweep, launch_sweep, sweep_project, watcher_id
from e2e_helpers import wait_for
from guarded_sbatch.scheduler import get_scheduler

pytestmark = [pytest.mark.long]


def test_one_local_watcher_stops_the_nan_task_alone_and_ends_with_the_array(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    project = sweep_project(tmp_path)
    monkeypatch.setenv("GUARDED_SBATCH_STATE_DIR", project.env["GUARDED_SBATCH_STATE_DIR"])
    local = get_scheduler("local")
    sweep = None
    try:
        sweep = launch_sweep(project, local, "--guard-backend", "local")
        watcher = watcher_id(sweep)
        wait_for(lambda: local.state(watcher).is_terminal, 120, 2, "the watcher job to end")
        end = local.info(watcher).end_time
        assert end is not None
        check_sweep(sweep, local, end)
    finally:
        if sweep is not None:
            local.cancel(sweep.job)
