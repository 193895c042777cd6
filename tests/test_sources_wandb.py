"""W&B local-log reader against a real offline run; the online adapter's row conversion."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest
from source_writers import wandb_history_with_pb2, write_wandb_offline_run

from guarded_sbatch.sources.points import Axis
from guarded_sbatch.sources.base import SourceError
from guarded_sbatch.sources.wandb_axis import WandbAxes
from guarded_sbatch.sources.wandb_api import parse_run_path, rows_to_points
from guarded_sbatch.sources.wandb_log import BLOCK_SIZE, WandbLogSource, find_wandb_file


@pytest.fixture(scope="session")
def wandb_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_wandb_offline_run(tmp_path_factory.mktemp("wandb-run"))


def _log(wandb_dir: Path) -> Path:
    found = find_wandb_file(wandb_dir)
    assert found is not None
    return found


def test_points_match_wandbs_own_decoder(wandb_dir: Path) -> None:
    source = WandbLogSource(wandb_dir)
    points = source.read_new()
    ours = {(p.key, p.step): p.value for p in points}
    theirs = {}
    for step, key, value_json in wandb_history_with_pb2(_log(wandb_dir)):
        if value_json in ("true", "false") or value_json.startswith('"'):
            continue
        theirs[(key, step)] = float(value_json.replace("Infinity", "inf"))
    assert ours.keys() == theirs.keys()
    for key, value in theirs.items():
        assert ours[key] == value or (math.isnan(value) and math.isnan(ours[key]))
    assert math.isnan(ours[("train/loss", 20)]) and ours[("grad_norm", 21)] == math.inf
    assert ours[("nested.inner", 5)] == 5.0 and ("eval/accuracy", 9) in ours
    assert all(p.wall_time > 1.6e9 for p in points)
    assert source.bad_records == 0 and source.version in (0, 1)
    assert "sources-test" in source.run_label() and source.run.display_name == "cifar10-resnet18-bs128-lr0.1"


def test_accepts_run_folder_wandb_folder_parent_and_file(wandb_dir: Path) -> None:
    log = _log(wandb_dir)
    expected = len(WandbLogSource(log).read_new())
    for path in (log, log.parent, wandb_dir, wandb_dir.parent):
        assert len(WandbLogSource(path).read_new()) == expected


def test_header_version_one_is_accepted_and_garbage_rejected(wandb_dir: Path, tmp_path: Path) -> None:
    data = bytearray(_log(wandb_dir).read_bytes())
    data[6] = 1
    (tmp_path / "run-v1.wandb").write_bytes(bytes(data))
    assert len(WandbLogSource(tmp_path / "run-v1.wandb").read_new()) > 100
    data[0:4] = b"XXXX"
    (tmp_path / "run-bad.wandb").write_bytes(bytes(data))
    bad = WandbLogSource(tmp_path / "run-bad.wandb")
    assert bad.read_new() == [] and bad.header_error


def test_growing_file_is_read_incrementally_without_loss(wandb_dir: Path, tmp_path: Path) -> None:
    data = _log(wandb_dir).read_bytes()
    target = tmp_path / "run-x.wandb"
    target.write_bytes(b"")
    source = WandbLogSource(target)
    collected = []
    for cut in list(range(0, len(data), 997)) + [len(data)]:
        target.write_bytes(data[:cut])
        collected += source.read_new()
    assert {(p.key, p.step): p.value for p in collected}.keys() == \
        {(p.key, p.step): p.value for p in WandbLogSource(_log(wandb_dir)).read_new()}.keys()
    assert source.bad_records == 0


def test_corrupt_chunk_drops_the_rest_of_its_block_only(wandb_dir: Path, tmp_path: Path) -> None:
    data = bytearray(_log(wandb_dir).read_bytes())
    data[200] ^= 0xFF
    (tmp_path / "run-c.wandb").write_bytes(bytes(data))
    source = WandbLogSource(tmp_path / "run-c.wandb")
    points = source.read_new()
    assert source.bad_records >= 1
    if len(data) > BLOCK_SIZE:
        assert points  # later blocks still read
    assert all(not math.isnan(p.value) or p.key == "train/loss" for p in points)


def test_missing_log_yields_nothing_until_it_appears(wandb_dir: Path, tmp_path: Path) -> None:
    source = WandbLogSource(tmp_path)
    assert source.read_new() == [] and source.files_inspected() == []
    shutil.copytree(_log(wandb_dir).parent, tmp_path / "offline-run-1-abc")
    assert len(source.read_new()) > 100


def test_rows_from_the_public_api_become_points() -> None:
    rows = [
        {"_step": 0, "_timestamp": 1.7e9, "_runtime": 3.0, "train/loss": 2.5, "lr": 0.1, "media": {"_type": "image"}},
        {"_step": 1, "_timestamp": 1.7e9 + 1, "train/loss": "NaN", "grad_norm": "Infinity", "flag": True},
        {"_step": 2, "eval/acc": None, "name": "text", "gn": float("-inf")},
        {"train/loss": 1.0},  # no _step: skipped
    ]
    points, _ = rows_to_points(rows)
    assert [(p.step, p.key) for p in points] == [(0, "train/loss"), (0, "lr"), (1, "train/loss"),
                                                 (1, "grad_norm"), (2, "gn")]
    assert points[0].wall_time == 1.7e9 and math.isnan(points[2].value) and points[3].value == math.inf
    assert points[4].value == -math.inf and points[4].wall_time == 0.0


def test_api_rows_use_the_step_like_key_and_skip_media() -> None:
    rows = [
        {"_step": 0, "iter": 0, "train/loss": 4.0, "loss_vis": {"_type": "image-file", "size": 69, "width": 8}},
        {"_step": 1, "iter": 250, "train/loss": "NaN", "val/loss": 3.0},
    ]
    axes = WandbAxes()
    points, _ = rows_to_points(rows, axes)
    assert [(p.step, p.key) for p in points] == [(0, "train/loss"), (250, "train/loss"), (250, "val/loss")]
    assert math.isnan(points[1].value) and axes.axes()["train/loss"] is Axis.STEP


def test_run_paths_and_urls() -> None:
    assert parse_run_path("https://wandb.ai/ent/proj/runs/abc123?workspace=x") == "ent/proj/abc123"
    assert parse_run_path("ent/proj/runs/abc123") == "ent/proj/abc123"
    assert parse_run_path("ent/proj/abc123") == "ent/proj/abc123"
    with pytest.raises(SourceError):
        parse_run_path("just-a-name")


def test_a_log_of_another_run_id_than_the_jobs_is_never_read(wandb_dir: Path, tmp_path: Path) -> None:
    log = _log(wandb_dir)
    own_id = WandbLogSource(log)
    assert own_id.read_new() and own_id.run.run_id
    assert WandbLogSource(log, run_id=own_id.run.run_id).read_new()  # the id the job was given: read
    # the same bytes in a folder named for the job's id: the Run record inside says whose log it is
    copy = tmp_path / "wandb" / "offline-run-20261203_100000-zz99zz99" / "run-zz99zz99.wandb"
    copy.parent.mkdir(parents=True)
    shutil.copyfile(log, copy)
    with pytest.raises(SourceError, match=f"is W&B run {own_id.run.run_id}, not this run's zz99zz99"):
        WandbLogSource(copy, run_id="zz99zz99").read_new()
