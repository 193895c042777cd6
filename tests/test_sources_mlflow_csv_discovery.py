"""MLflow (real mlflow writer: SQLite and file store), Lightning CSV, and source discovery."""

from __future__ import annotations

import importlib.util

import math
import os
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import require
from source_writers import tb_event, write_tb_events

from guarded_sbatch.core.runner import run_command
from guarded_sbatch.sources.base import SourceError
from guarded_sbatch.sources.csvlog import LightningCsvSource
from guarded_sbatch.sources.discovery import discover, picked
from guarded_sbatch.sources.kinds import open_source
from guarded_sbatch.sources.mlflow import MlflowSource
from guarded_sbatch.sources.textlog import TextLogSource

MLFLOW_SCRIPT = textwrap.dedent(
    """
    import math, sys, mlflow
    mlflow.set_tracking_uri(sys.argv[1])
    with mlflow.start_run(run_name="first"):
        mlflow.log_metric("train/loss", 9.0, step=0)
    with mlflow.start_run(run_name="cifar10-resnet18"):
        for step in range(int(sys.argv[2]), int(sys.argv[3])):
            mlflow.log_metric("train/loss", math.nan if step == 3 else 1.0 / (step + 1), step=step)
        mlflow.log_metric("grad_norm", math.inf, step=4)
    """
)


def _log_with_mlflow(tmp_path: Path, uri: str, first: int, last: int) -> None:
    require(importlib.util.find_spec("mlflow") is not None, "mlflow is a test extra: pip install -e '.[test]'")
    script = tmp_path / "log.py"
    script.write_text(MLFLOW_SCRIPT)
    env = dict(os.environ, MLFLOW_ALLOW_FILE_STORE="true")
    run_command([sys.executable, str(script), uri, str(first), str(last)], cwd=tmp_path, env=env, timeout=120)


def test_mlflow_sqlite_store_newest_run_incremental(tmp_path: Path) -> None:
    _log_with_mlflow(tmp_path, f"sqlite:///{tmp_path}/mlflow.db", 0, 5)
    source = MlflowSource(tmp_path / "mlflow.db")
    values = {(p.key, p.step): p.value for p in source.read_new()}
    assert values[("train/loss", 0)] == 1.0 and math.isnan(values[("train/loss", 3)])
    assert values[("grad_norm", 4)] == math.inf and len(values) == 6  # the older run's 9.0 is not mixed in
    assert source.read_new() == [] and source.error == ""


def test_mlflow_file_store(tmp_path: Path) -> None:
    _log_with_mlflow(tmp_path, (tmp_path / "mlruns").as_uri(), 0, 5)
    source = open_source("mlflow", tmp_path / "mlruns")
    values = {(p.key, p.step): p.value for p in source.read_new()}
    assert values[("train/loss", 1)] == 0.5 and math.isnan(values[("train/loss", 3)])
    assert values[("grad_norm", 4)] == math.inf
    assert isinstance(source, MlflowSource) and source.run_id
    metric_file = next((tmp_path / "mlruns").glob(f"*/{source.run_id}/metrics/train/loss"))
    with open(metric_file, "a") as handle:
        handle.write("1700000000000 0.125 7\n1700000000001 0.1")  # second line still being written
    assert [(p.step, p.value) for p in source.read_new()] == [(7, 0.125)]


def test_mlflow_garbage_database_is_an_error_not_a_crash(tmp_path: Path) -> None:
    (tmp_path / "mlflow.db").write_bytes(b"not sqlite at all" * 100)
    source = MlflowSource(tmp_path / "mlflow.db")
    assert source.read_new() == [] and source.error


def test_lightning_csv_rewritten_with_new_columns(tmp_path: Path) -> None:
    csv_file = tmp_path / "metrics.csv"
    csv_file.write_text("epoch,step,train_loss_step\n0,49,7.62\n0,99,6.5\n")
    source = LightningCsvSource(csv_file)
    assert [(p.key, p.step, p.value) for p in source.read_new()] == [
        ("epoch", 49, 0.0), ("train_loss_step", 49, 7.62), ("epoch", 99, 0.0), ("train_loss_step", 99, 6.5)]
    # Lightning rewrites the whole file when val_loss first appears.
    csv_file.write_text("epoch,step,train_loss_step,val_loss\n0,49,7.62,\n0,99,6.5,\n0,99,,nan\n0,149,5.0,\n")
    assert sorted((p.key, p.step) for p in source.read_new()) == [("epoch", 149), ("train_loss_step", 149),
                                                                  ("val_loss", 99)]
    with open(csv_file, "a") as handle:
        handle.write("0,199,4.5,\n0,2")
    assert [(p.key, p.step) for p in source.read_new()] == [("epoch", 199), ("train_loss_step", 199)]


def test_discovery_priority_and_kinds(tmp_path: Path) -> None:
    write_tb_events(tmp_path / "runs" / "exp1" / "train", [tb_event(1, "loss", 1.0)])
    write_tb_events(tmp_path / "runs" / "exp1" / "validation", [tb_event(1, "loss", 2.0)])
    (tmp_path / "lightning_logs" / "version_0").mkdir(parents=True)
    (tmp_path / "lightning_logs" / "version_0" / "metrics.csv").write_text("step,loss\n1,2.0\n")
    specs, _ = discover(tmp_path, since=None)
    assert [s.kind for s in specs] == ["tensorboard", "csv"]
    keys = {p.key for p in open_source(specs[0].kind, specs[0].locator).read_new()}
    assert keys == {"train/loss", "validation/loss"}
    run_dir = tmp_path / "wandb" / "run-20250101_000000-abc"
    run_dir.mkdir(parents=True)
    (run_dir / "run-abc.wandb").write_bytes(b":W&B\xe1\xbe\x00")
    assert discover(tmp_path, since=None)[0][0].kind == "wandb"


def test_discovery_is_bounded(tmp_path: Path) -> None:
    deep = tmp_path
    for level in range(8):
        deep = deep / f"d{level}"
    write_tb_events(deep, [tb_event(1, "loss", 1.0)])
    assert picked(tmp_path, max_depth=3) == ([], [])
    assert [kind.name for kind, _ in picked(tmp_path, max_depth=10)[0]] == ["tensorboard"]
    assert picked(tmp_path, time_budget_s=0.0) == ([], [])


def test_open_source_by_kind(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("iter 1: loss 2.0\n")
    assert isinstance(open_source("textlog", log), TextLogSource)
    with pytest.raises(SourceError, match="does not exist"):
        open_source("tensorboard", tmp_path / "missing")
    with pytest.raises(SourceError, match="no run-"):
        open_source("wandb", tmp_path)
    with pytest.raises(SourceError, match="unknown source kind"):
        open_source("neptune", log)
    assert open_source("wandb", "https://wandb.ai/ent/proj/runs/abc").describe() == "ent/proj/abc"
