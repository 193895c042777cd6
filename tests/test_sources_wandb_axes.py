"""The x-axis a W&B user sees, read from real offline runs written by the installed wandb: nanoGPT's
`iter`, define_metric step metrics (transformers' WandbCallback layout), `_step` as log calls,
resumed runs, and media (wandb.Image) that are never metrics. Values are checked against wandb's
own protobuf decoding of the same log, and the decisions against the same run's stdout."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from source_writers import wandb_rows_with_pb2, write_wandb_axes_runs

from guarded_sbatch.sources.points import Axis
from guarded_sbatch.judge import Decision, MetricHistory, decide
from guarded_sbatch.sources.wandb_log import WandbLogSource, find_wandb_file, resumed_parts

MEDIA_FIELDS = ("width", "height", "size", "sha256", "path", "format", "_type")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_wandb_axes_runs(tmp_path_factory.mktemp("wandb-axes"))


def _values(points: list) -> dict[tuple[str, int], float]:  # type: ignore[type-arg]
    return {(p.key, p.step): p.value for p in points}


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def _theirs(log: Path, axis_key: str | None, skip: tuple[str, ...] = ()) -> dict[tuple[str, int], float]:
    """(key, step) -> value from wandb's own decoding, the step read from axis_key (else `_step`)."""
    out: dict[tuple[str, int], float] = {}
    for row in wandb_rows_with_pb2(log):
        step = int(float(row[axis_key] if axis_key and axis_key in row else row["_step"]))
        for key, value_json in row.items():
            if key.startswith("_") or key == axis_key or key in skip or value_json.startswith(('"', "{", "[")):
                continue
            out[(key, step)] = float(value_json.replace("Infinity", "inf"))
    return out


def _once(*args: str, cwd: Path) -> dict:  # type: ignore[type-arg]
    result = subprocess.run([sys.executable, "-m", "guarded_sbatch", "monitor", "--once", "--json", *args],
                            cwd=cwd, capture_output=True, text=True, timeout=120)
    payload = json.loads(result.stdout)
    assert result.returncode == {"CONTINUE": 0, "WAIT": 10, "STOP": 11}[payload["decision"]], result.stderr
    return payload


def test_nanogpt_points_sit_at_iterations_not_log_calls(runs: Path) -> None:
    source = WandbLogSource(runs / "nanogpt_healthy" / "wandb")
    points = source.read_new()
    log = find_wandb_file(runs / "nanogpt_healthy" / "wandb")
    assert log is not None
    theirs = _theirs(log, "iter")
    ours = _values(points)
    assert ours.keys() == theirs.keys() and all(_same(ours[k], theirs[k]) for k in theirs)
    assert sorted(s for k, s in ours if k == "train/loss") == list(range(0, 2001, 100))
    assert "iter" not in {p.key for p in points}  # the axis, not a metric
    assert source.axis.default_key == "iter" and set(source.axes().values()) == {Axis.STEP}


@pytest.mark.parametrize("name", ["nanogpt_healthy", "nanogpt_nan"])
def test_nanogpt_wandb_and_its_stdout_agree_through_the_cli(runs: Path, name: str) -> None:
    folder = runs / name
    from_wandb = _once("--wandb", "wandb", cwd=folder)
    from_log = _once("--log", "train.log", cwd=folder)
    assert from_wandb["last_step"] == from_log["last_step"] == 2000
    assert from_wandb["decision"] == from_log["decision"]
    assert from_wandb["decision"] == ("CONTINUE" if name == "nanogpt_healthy" else "STOP")
    if name == "nanogpt_nan":
        assert from_wandb["reason"] == from_log["reason"] == "non_finite_loss"


def test_media_are_never_metrics_and_a_nan_beside_an_image_stops(runs: Path) -> None:
    folder = runs / "image_nan"
    log = find_wandb_file(folder / "wandb")
    assert log is not None
    rows = wandb_rows_with_pb2(log)
    # The real log holds the image flattened into numeric fields: the trap this guards against.
    assert all(f"loss_vis.{field}" in rows[0] for field in MEDIA_FIELDS)
    assert "samples.grid.size" in rows[0] and "samples.count" in rows[0]
    points = WandbLogSource(folder / "wandb").read_new()
    assert {p.key for p in points} == {"loss", "lr", "samples.count"}
    ours = _values(points)
    theirs = _theirs(log, None, skip=tuple(k for k in rows[0] if k.startswith(("loss_vis", "samples.grid"))))
    assert ours.keys() == theirs.keys() and all(_same(ours[k], theirs[k]) for k in theirs)
    verdict = decide(MetricHistory.from_points(points))
    assert verdict.decision is Decision.STOP and verdict.summary["keys"]["train_loss"] == "loss"
    payload = _once("--wandb", "wandb", cwd=folder)
    assert payload["decision"] == "STOP" and payload["reason"] == "non_finite_loss"


def test_define_metric_step_metrics_are_the_axis(runs: Path) -> None:
    source = WandbLogSource(runs / "hf_define" / "wandb")
    points = source.read_new()
    by_key: dict[str, list[int]] = {}
    for point in points:
        by_key.setdefault(point.key, []).append(point.step)
    assert by_key["train/loss"] == list(range(10, 301, 10))
    assert by_key["eval/loss"] == [100, 200, 300]  # a row of its own, with the step metric in it
    assert by_key["val/acc"] == [1, 2, 3]  # define_metric("val/acc", step_metric="epoch")
    assert "train/global_step" not in by_key and "epoch" not in by_key
    axes = source.axes()
    assert axes["val/acc"] is Axis.EPOCH and axes["train/loss"] is Axis.STEP and axes["eval/loss"] is Axis.STEP
    log = find_wandb_file(runs / "hf_define" / "wandb")
    assert log is not None
    ours = _values(points)
    for row in wandb_rows_with_pb2(log):  # every value where wandb's own decoding puts it on the step metric's axis
        if "train/loss" in row:
            assert ours[("train/loss", int(row["train/global_step"]))] == float(row["train/loss"])


@pytest.mark.parametrize("name", ["resumed_calls", "resumed_iter"])
def test_a_resumed_run_continues_its_axis(runs: Path, name: str) -> None:
    wandb_dir = runs / name / "wandb"
    first, second = sorted(wandb_dir.glob("offline-run-*"))
    parts = resumed_parts(next(second.glob("*.wandb")))
    assert [p.parent for p in parts] == [first, second]
    for path in (wandb_dir, next(first.glob("*.wandb")), wandb_dir / "latest-run"):
        source = WandbLogSource(path)
        points = source.read_new()
        steps = [p.step for p in points if p.key == "loss"]
        if name == "resumed_calls":  # offline resumes count log() calls from 0 again: continued here
            assert steps == list(range(20)) and source.axes()["loss"] is Axis.LOG_CALL
        else:
            assert steps == [50 * i for i in range(20)] and source.axes()["loss"] is Axis.STEP
        values = [p.value for p in points if p.key == "loss"]
        assert values[10] == 2.0 and values[9] == pytest.approx(1.09)
        assert len(source.files_inspected()) == 2
        assert source.describe() == str(next(first.glob("*.wandb")).resolve())  # one run, whichever part opened it


def test_a_resume_started_while_watching_is_picked_up(runs: Path, tmp_path: Path) -> None:
    import shutil

    src = runs / "resumed_calls" / "wandb"
    first, second = sorted(src.glob("offline-run-*"))
    target = tmp_path / "wandb"
    target.mkdir()
    shutil.copytree(first, target / first.name)
    source = WandbLogSource(target)
    assert [p.step for p in source.read_new()] == list(range(10))
    shutil.copytree(second, target / second.name)
    assert [p.step for p in source.read_new()] == list(range(10, 20))
