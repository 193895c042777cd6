"""Real trainers in their default layouts, launched the everyday way (`guarded-sbatch train.sh ARGS`, no guard
flag, each on a fresh copy of its example project) on the local backend: the NaN run and the diverging run are
stopped by their sidecars, the healthy run completes untouched, and the reports name the metrics as the trainer
writes them (train/loss, eval/loss, train_loss, Loss/train ...). The three runs of an example run side by side."""

from __future__ import annotations

from pathlib import Path

import pytest

from framework_runs import HF, LIGHTNING_CSV, LIGHTNING_TB, SUMMARY_WRITER, Example, assert_outcome, launch, wait_until_ended
from guarded_sbatch.scheduler.local import LocalScheduler

pytestmark = pytest.mark.frameworks


@pytest.mark.parametrize("example", [HF, LIGHTNING_CSV, LIGHTNING_TB, SUMMARY_WRITER],
                         ids=["hf-trainer", "lightning-csv", "lightning-tensorboard", "summary-writer"])
def test_nan_and_diverging_runs_are_stopped_and_the_healthy_one_completes(tmp_path: Path, example: Example) -> None:
    runs = [launch(tmp_path, example, variant, backend="local") for variant in ("healthy", "nan", "diverge")]
    scheduler = LocalScheduler(tmp_path / "state" / "local-jobs")
    wait_until_ended(runs, lambda run: scheduler, timeout=240)
    for run in runs:
        assert_outcome(run, example, scheduler)
