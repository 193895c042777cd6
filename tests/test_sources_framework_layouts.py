"""Real frameworks' default folder layouts, written by the real writers: a run's folder (SummaryWriter's and HF's
runs/<date>_<host>, Lightning's version_N) is no part of a metric's name, while the namespaces TensorBoard itself
shows (Keras's train/ and validation/, a writer's add_scalars subfolders) still are, and sibling runs in one
folder are never merged. Lightning's CSVLogger is found in the run's own output folder."""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

import pytest

from conftest import require
from guarded_sbatch.sources.run_sources import RunSources
from guarded_sbatch.sidecar.plan import WatchPlan
from guarded_sbatch.sidecar.source_set import SourceSet
from guarded_sbatch.sources.discovery import discover
from guarded_sbatch.sources.kind_tensorboard import fresh_files
from guarded_sbatch.sources.tensorboard import TensorBoardSource
from package_extras import tb_folders, tb_specs
from source_writers import tb_event, write_tb_events

pytestmark = pytest.mark.frameworks


def _summary_writer():  # type: ignore[no-untyped-def]
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        require(False, "torch not installed (pip install -e '.[torch]')")
    return SummaryWriter


def _keys(source: TensorBoardSource) -> set[str]:
    return {point.key for point in source.read_new()}


def test_a_bare_summary_writer_names_metrics_by_their_tags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    writer = _summary_writer()()  # no logdir: runs/<Mon><DD>_<HH-MM-SS>_<host>
    for step in range(1, 6):
        writer.add_scalar("Loss/train", 1.0 / step, step)
        writer.add_scalars("Loss", {"eval": 2.0 / step}, step)  # a subfolder Loss_eval/ of the same run
    writer.close()
    (run,) = (tmp_path / "runs").iterdir()
    assert run.name.startswith(time.strftime("%b%d")) and any(run.glob("*tfevents*"))
    for root in (tmp_path, tmp_path / "runs", run):
        assert _keys(TensorBoardSource(root)) == {"Loss/train", "Loss_eval/Loss"}, root
    specs, note = discover(tmp_path, since=0.0)  # the writer's subfolder is part of its run: one candidate
    assert note == "" and [s.locator for s in specs] == [str(run)]


def test_lightning_version_folders_are_no_part_of_the_names_but_two_versions_stay_apart(tmp_path: Path) -> None:
    try:
        from lightning.pytorch.loggers import TensorBoardLogger
    except ImportError:
        require(False, "lightning not installed (pip install -e '.[frameworks]')")
    for version_loss in (0.5, 0.25):
        logger = TensorBoardLogger(save_dir=str(tmp_path))  # lightning_logs/version_N, a new N per run
        for step in range(3):
            logger.log_metrics({"train_loss": version_loss, "val_loss": version_loss * 2}, step=step)
        logger.finalize("success")
        if version_loss == 0.5:
            one = TensorBoardSource(tmp_path / "lightning_logs")
            assert {p.key for p in one.read_new()} == {"train_loss", "val_loss"}
    both = TensorBoardSource(tmp_path / "lightning_logs").read_new()
    assert {(p.key, p.value) for p in both if p.step == 0} == {
        ("version_0/train_loss", 0.5), ("version_0/val_loss", 1.0),
        ("version_1/train_loss", 0.25), ("version_1/val_loss", 0.5)}
    newest = tmp_path / "lightning_logs" / "version_1"
    only_new = TensorBoardSource(tmp_path, accept=lambda path: newest in path.parents)  # a run's own files only
    assert {p.key for p in only_new.read_new()} == {"train_loss", "val_loss"}


def test_keras_split_folders_keep_their_names_and_a_later_run_never_merges(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    write_tb_events(logs / "train", [tb_event(1, "epoch_loss", 2.0)])
    write_tb_events(logs / "validation", [tb_event(1, "epoch_loss", 3.0)])
    source = TensorBoardSource(logs)
    assert {(p.key, p.value) for p in source.read_new()} == {("train/epoch_loss", 2.0), ("validation/epoch_loss", 3.0)}
    runs = tmp_path / "runs"  # HF's layout: output_dir/runs/<date>_<host>, one writer
    write_tb_events(runs / "Dec03_06-54-59_vm", [tb_event(1, "train/loss", 1.0), tb_event(1, "eval/loss", 1.5)])
    hf = TensorBoardSource(runs)
    assert _keys(hf) == {"train/loss", "eval/loss"}
    write_tb_events(runs / "Dec03_07-10-00_vm", [tb_event(1, "train/loss", math.nan)])  # a second run, later
    assert {p.key for p in hf.read_new()} == {"Dec03_07-10-00_vm/train/loss"}  # never read as the first one's


def test_a_requeued_hf_job_goes_on_in_a_new_date_folder_under_the_same_names(tmp_path: Path) -> None:
    runs = tmp_path / "outputs" / "runs"
    write_tb_events(runs / "Dec03_06-54-59_node1", [tb_event(step, "train/loss", 3.0 - step / 10) for step in (2, 4, 6)])
    source = TensorBoardSource(tmp_path / "outputs", accept=lambda path: True)  # both are this job's own files
    assert _keys(source) == {"train/loss"}
    write_tb_events(runs / "Dec03_07-30-12_node2", [tb_event(step, "train/loss", math.nan) for step in (6, 8)])
    assert {(p.key, p.step) for p in source.read_new()} == {("train/loss", 6), ("train/loss", 8)}


def test_only_the_runs_own_date_folder_is_read_under_an_hf_output_dir(tmp_path: Path) -> None:
    output_dir = tmp_path / "outputs"
    old = write_tb_events(output_dir / "runs" / "Dec02_09-00-00_vm", [tb_event(1, "train/loss", math.nan)])
    parts = old.name.split(".")
    parts[3] = str(int(parts[3]) - 86400)  # the file name holds its creation time: yesterday's run
    old.rename(old.with_name(".".join(parts)))
    since = time.time()
    write_tb_events(output_dir / "runs" / "Dec03_06-54-59_vm", [tb_event(1, "train/loss", 1.0)])
    source = TensorBoardSource(output_dir, accept=fresh_files(since - 1))
    assert {(p.key, p.value) for p in source.read_new()} == {("train/loss", 1.0)}


def test_a_lightning_csv_logger_in_the_runs_output_folder_is_read_by_the_sidecar(tmp_path: Path) -> None:
    try:
        from lightning.pytorch.loggers import CSVLogger
    except ImportError:
        require(False, "lightning not installed (pip install -e '.[frameworks]')")
    root = tmp_path / "logs" / "regressor"
    old = CSVLogger(save_dir=str(root))  # an earlier run of the same config: version_0
    old.log_metrics({"train_loss": math.nan}, step=9)
    old.save()
    os.utime(root / "lightning_logs" / "version_0" / "metrics.csv", (1.0, 1.0))
    since = time.time() - 1
    identity = RunSources(since=since, workdir=str(tmp_path), specs=tb_specs(root), output_dirs=[str(root)])
    settings = WatchPlan(run_name="r", job_id=None, state_file=tmp_path / "s.json",
                               evidence_dir=tmp_path / "e", identity=identity)
    sources = SourceSet(settings, None)
    assert sources.read() == 0  # nothing written yet: nothing to read, nothing ambiguous
    logger = CSVLogger(save_dir=str(root))  # this run: version_1
    for step in range(9, 60, 10):
        logger.log_metrics({"train_loss": 1.0 / step, "epoch": 0}, step=step)
    logger.save()
    assert sources.read() == 12 and sources.active_kind == "csv"  # six rows of train_loss and epoch
    assert sources.describe() == str(root / "lightning_logs" / "version_1" / "metrics.csv")
    history = sources.history()
    steps, values = history.series("train_loss")
    assert list(steps) == list(range(9, 60, 10)) and not any(math.isnan(v) for v in values)  # version_0 unread


@pytest.mark.parametrize("folder, script, tb_path", [
    ("hf_trainer", "train.sh", "outputs/synthetic-counting-gpt2-tiny-lr1e-3"),
    ("lightning_tiny", "train.sh", "logs/synthetic-tanh-lightning"),
    ("lightning_tiny", "train-tb.sh", "logs/synthetic-tanh-lightning"),
    ("summarywriter_loop", "train.sh", None),
])
def test_each_example_passes_the_preflight_as_a_new_project(tmp_path: Path, folder: str, script: str,
                                                            tb_path: str | None) -> None:
    """No guard flag, no reference run yet: warnings only (Lightning's default_root_dir is the run's output folder,
    not a data set that must exist), and the run's own folder is what the sidecar will read."""
    import shutil

    from e2e_helpers import REPO
    from guarded_sbatch.core.config import Config
    from guarded_sbatch.sbatch.argv import split_sbatch_argv
    from guarded_sbatch.launch.preflight import run_preflight
    from guarded_sbatch.launch.results import CheckStatus

    root = tmp_path / folder
    shutil.copytree(REPO / "examples" / folder, root, ignore=shutil.ignore_patterns("__pycache__"))
    report = run_preflight(split_sbatch_argv([script]), Config(), None, cwd=root,
                           env={"PATH": os.environ["PATH"], "GUARDED_SBATCH_BACKEND": "local"})
    failed = [(r.name, r.finding) for r in report.results if r.status is CheckStatus.FAILED]
    assert failed == []
    plan = report.details["source_plan"]
    assert tb_folders(plan.sources) == ([str(root / tb_path)] if tb_path else [])


@pytest.mark.parametrize("key, role", [
    ("default_root_dir", "output"), ("trainer.default_root_dir", "output"), ("log_root", "output"),
    ("exp_root", "output"), ("tensorboard_dir", "output"), ("logging_dir", "output"), ("save_dir", "output"),
    ("root_dir", "output"), ("trainer.root_dir", "output"), ("data.root_dir", "data"), ("data_root", "data"),
    ("dataset.root", "data"),
])
def test_a_frameworks_output_folder_key_is_an_output_not_a_data_set(key: str, role: str) -> None:
    from guarded_sbatch.launch.checks.paths import _role

    assert _role(key, "runs/x") == role


def test_another_run_naming_the_same_output_folder_takes_nothing_of_it_but_its_own_subfolder(tmp_path: Path) -> None:
    from guarded_sbatch.sources.discovery import claims_below

    root = tmp_path / "logs" / "regressor"
    (root / "lightning_logs" / "version_0").mkdir(parents=True)
    claimed = [str(root), str(tmp_path / "logs"), str(root / "lightning_logs" / "version_0"), str(tmp_path / "other")]
    assert claims_below(root, claimed) == [str(root / "lightning_logs" / "version_0")]
