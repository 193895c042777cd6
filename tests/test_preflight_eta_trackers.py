"""The eta check's queue wait for each answer a scheduler gives, and the monitoring check's tracker detection
for each tracker, on the realistic project tree of preflight_tree.py."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from guarded_sbatch.core.errors import SchedulerError
from guarded_sbatch.launch.results import CheckStatus
from guarded_sbatch.scheduler.interface import SubmitRequest
from guarded_sbatch.scheduler.local import LocalScheduler

from preflight_tree import Tree, build_clean_tree, intended_config

NOW = datetime(2026, 3, 2, 9, 0, tzinfo=timezone.utc)


class AnsweringScheduler(LocalScheduler):
    """The real local backend, with the start estimate a Slurm controller might give (a fault injected)."""

    def __init__(self, root: Path, answer: object) -> None:
        super().__init__(root=root)
        self.answer = answer

    def estimate_start(self, request: SubmitRequest) -> float | None:
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer  # type: ignore[return-value]


def result(report, name: str):  # type: ignore[no-untyped-def]
    return next(r for r in report.results if r.name == name)


@pytest.fixture
def tree(tmp_path: Path) -> Tree:
    return build_clean_tree(tmp_path / "project")


@pytest.mark.parametrize(("answer", "status", "words"), [
    (NOW.timestamp() + 1800, CheckStatus.PASSED, "expected start"),
    (None, CheckStatus.WARNED, "the scheduler gave no start estimate: queue wait counted as zero"),
    (SchedulerError("squeue timed out"), CheckStatus.WARNED, "queue wait unknown (squeue timed out)"),
    (NOW.timestamp() + 400 * 86400, CheckStatus.WARNED, "the scheduler cannot say when the job would start"),
])
def test_the_queue_wait_follows_the_schedulers_answer(tree: Tree, tmp_path: Path, answer: object,
                                                      status: CheckStatus, words: str) -> None:
    scheduler = AnsweringScheduler(tmp_path / "jobs", answer)
    eta = result(tree.run(["--guard-seconds-per-epoch=600", "train.sh"], scheduler=scheduler, now=NOW), "eta")
    assert eta.status is status, eta
    assert words in eta.finding or any(words in line for line in eta.evidence), eta
    waited = 1800 if status is CheckStatus.PASSED else 0
    assert eta.details["start_epoch_s"] == NOW.timestamp() + waited
    assert eta.details["eta_epoch_s"] == (NOW + timedelta(seconds=waited + 12 * 600)).timestamp()


def test_no_scheduler_counts_the_wait_as_zero_and_an_unknown_length_names_what_to_give(tree: Tree) -> None:
    eta = result(tree.run(["--guard-seconds-per-epoch=600", "train.sh"], now=NOW), "eta")
    assert eta.status is CheckStatus.WARNED and "no scheduler: queue wait unknown, counted as zero" in eta.finding
    unknown = result(tree.run(["train.sh"], now=NOW), "eta")
    assert unknown.status is CheckStatus.WARNED
    assert unknown.finding.startswith(
        "not checked: cannot estimate the run time (no earlier run of this config has a log that times it); "
        "give seconds per epoch (--guard-seconds-per-epoch), or read the ETA from the run's own pace once it runs"
    )  # a config folder is never called "the reference's logs"
    assert "max_steps, total_steps" in unknown.finding and "steps)" in unknown.finding
    tree.write_config("configs/coco_resnet50.yaml", intended_config(**{"train.epochs": None}))
    no_epochs = result(tree.run(["train.sh"], now=NOW), "eta")
    assert "; give the number of epochs (--guard-epochs) and seconds per epoch (--guard-seconds-per-epoch), " \
        in no_epochs.finding, no_epochs.finding


@pytest.mark.parametrize(("program", "env", "kinds"), [
    ("import neptune\n", {"NEPTUNE_PROJECT": "lab/p"}, ["neptune"]),
    ("import mlflow\nmlflow.set_experiment('coco')\n", {}, ["mlflow"]),
    ("from torch.utils.tensorboard import SummaryWriter\n", {}, ["tensorboard"]),
    ("from lightning.pytorch.loggers import WandbLogger\n", {}, ["wandb"]),
    ("print('plain')\n", {"WANDB_API_KEY": "k", "MLFLOW_TRACKING_URI": "http://m:5000"}, ["wandb", "mlflow"]),
])
def test_each_tracker_is_found_by_its_signs(tree: Tree, program: str, env: dict[str, str], kinds: list[str]) -> None:
    tree.write("train.py", program)
    (tree.root / "runs").rmdir()  # no TensorBoard folder: only the program and the environment tell
    check = result(tree.run(env=env), "monitoring")
    found = [t["kind"] for t in check.details["trackers"]]  # type: ignore[index]
    assert found == kinds, check
    settings = {t["kind"]: t["settings"] for t in check.details["trackers"]}  # type: ignore[index]
    if "neptune" in kinds:
        assert settings["neptune"] == {"project": "lab/p"}
    if program.startswith("import mlflow"):
        assert settings["mlflow"] == {"experiment": "coco"} and check.status is CheckStatus.PASSED
    if "wandb" in kinds:
        assert settings["wandb"]["project"] == "coco-detection"  # the script's WANDB_PROJECT
