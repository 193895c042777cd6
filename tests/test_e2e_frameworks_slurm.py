"""The HF Trainer and Lightning CSVLogger examples on the real dev Slurm, launched the everyday way
(`guarded-sbatch train.sh ARGS`, no guard flag, sbatch on PATH, a fresh copy of the project per run): the NaN and
the diverging runs are cancelled by their sidecars, the healthy one completes, the reports name the metrics as the
trainer writes them."""

from __future__ import annotations

from pathlib import Path

import pytest

from framework_runs import HF, LIGHTNING_CSV, Example, assert_outcome, assert_status, launch, wait_until_ended
from guarded_sbatch.scheduler.slurm import SlurmScheduler

pytestmark = [pytest.mark.frameworks, pytest.mark.slurm]


@pytest.mark.parametrize("example", [HF, LIGHTNING_CSV], ids=["hf-trainer", "lightning-csv"])
def test_nan_and_diverging_runs_are_cancelled_and_the_healthy_one_completes(
    slurm_cluster: None, tmp_path: Path, example: Example
) -> None:
    runs = [launch(tmp_path, example, variant, backend=None) for variant in ("healthy", "nan", "diverge")]
    assert all(run.record["backend"] == "slurm" for run in runs)
    scheduler = SlurmScheduler(state_dir=tmp_path / "test-slurm-cache")
    wait_until_ended(runs, lambda run: scheduler, timeout=300)
    for run in runs:
        assert_outcome(run, example, scheduler)
    assert_status(runs)
