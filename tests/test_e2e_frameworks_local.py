"""Real trainers in their default layouts, launched the everyday way (`guarded-sbatch train.sh ARGS`, no guard
flag, each on a fresh copy of its example project) on the local backend: the NaN run and the diverging run are
stopped by their sidecars, the healthy run completes untouched, and the reports name the metrics as the trainer
writes them (train_loss, val_loss, Loss/train ...). The three runs of an example run side by side."""

from __future__ import annotations

from pathlib import Path

import pytest

from framework_runs import (
    LIGHTNING_CSV,
    LIGHTNING_TB,
    SUMMARY_WRITER,
    Example,
    metric_lines,
    assert_outcome,
    assert_status,
    launch,
    wait_until_ended,
)
from guarded_sbatch.scheduler.local import LocalScheduler

pytestmark = pytest.mark.frameworks


# the HF Trainer and Lightning's CSV logger run this scenario on the dev Slurm (test_e2e_frameworks_slurm.py): the
# trainer's layout is the subject here, not the backend, so each layout runs once
@pytest.mark.parametrize("example", [LIGHTNING_TB, SUMMARY_WRITER], ids=["lightning-tensorboard", "summary-writer"])
def test_nan_and_diverging_runs_are_stopped_and_the_healthy_one_completes(tmp_path: Path, example: Example) -> None:
    runs = [launch(tmp_path, example, variant, backend="local") for variant in ("healthy", "nan", "diverge")]
    scheduler = LocalScheduler(tmp_path / "state" / "local-jobs")
    wait_until_ended(runs, lambda run: scheduler, timeout=240)
    for run in runs:
        assert_outcome(run, example, scheduler)
    assert_status(runs)


@pytest.mark.parametrize("example", [LIGHTNING_CSV, SUMMARY_WRITER], ids=["lightning-csv", "summary-writer"])
def test_a_second_run_of_the_project_is_judged_on_its_own_new_folder(tmp_path: Path, example: Example) -> None:
    """Lightning makes a new lightning_logs/version_N per run, SummaryWriter a new runs/<date>_<host>: the healthy
    relaunch after a NaN run is judged on its own folder only, never on the stopped run's NaN."""
    scheduler = LocalScheduler(tmp_path / "state" / "local-jobs")
    broken = launch(tmp_path, example, "nan", backend="local")
    wait_until_ended([broken], lambda run: scheduler, timeout=240)
    assert_outcome(broken, example, scheduler)
    again = launch(tmp_path, example, "healthy", backend="local", project=broken.project)
    wait_until_ended([again], lambda run: scheduler, timeout=240)
    assert_outcome(again, example, scheduler)  # `show` reads the run's recorded folder too, beside the stopped one
    folders = {"lightning_tiny": "lightning_logs/version_*", "summarywriter_loop": "runs/*_*"}[example.folder]
    assert len(list(broken.project.root.glob(f"**/{folders}"))) == 2  # the trainer's new folder per run
    judged = metric_lines(again.project.sidecar_output(again.job_id))
    assert "NaN" not in judged and "nan in" not in judged, judged
