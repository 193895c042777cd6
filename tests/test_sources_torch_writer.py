"""TensorBoard files written by torch's own SummaryWriter (the torch extra that scripts/test installs):
simple_value scalars and new_style tensor scalars, read while the writer is still open."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from guarded_sbatch.sources.tensorboard import TensorBoardSource


def _summary_writer():  # type: ignore[no-untyped-def]
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail("torch is missing under CI=true: scripts/test installs the torch extra")
        pytest.skip("torch not installed (pip install -e '.[torch]')")
    return SummaryWriter


@pytest.mark.parametrize("new_style", [False, True])
def test_torch_summary_writer_scalars_are_read_incrementally(tmp_path: Path, new_style: bool) -> None:
    writer = _summary_writer()(log_dir=str(tmp_path), flush_secs=1)
    source = TensorBoardSource(tmp_path)
    expected: dict[int, float] = {}
    for step in range(50):
        value = math.nan if step == 30 else 1.0 / (step + 1)
        writer.add_scalar("train/loss", value, step, new_style=new_style)
        expected[step] = value
    writer.flush()
    first = source.read_new()
    for step in range(50, 80):
        writer.add_scalar("train/loss", 1.0 / (step + 1), step, new_style=new_style)
        expected[step] = 1.0 / (step + 1)
    writer.close()
    second = source.read_new()
    points = [p for p in first + second if p.key == "train/loss"]
    assert sorted(p.step for p in points) == list(range(80))  # each point exactly once
    for point in points:
        want = expected[point.step]
        assert (math.isnan(point.value) and math.isnan(want)) or point.value == pytest.approx(want, rel=1e-6)
    assert source.read_new() == []
