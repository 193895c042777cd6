"""A misspelled config key (`batch_szie: 128`) fails the pre-flight with "did you mean batch_size?", against the keys
the program reads (its source) or the reference config's; real keys that are not typos of each other pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from guarded_sbatch.launch.checks.config_keys import _one_typo
from guarded_sbatch.launch.results import CheckStatus
from preflight_tree import REFERENCE, Tree, build_clean_tree, intended_config

READS_ITS_CONFIG = """\
import argparse, yaml

def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--config")
    parser.add_argument("--num-workers", type=int, default=2)
    args = parser.parse_args()
    config = yaml.safe_load(open(args.config))
    batch = config.get("batch_size", 32)
    lr = config["lr"]
"""


def _config_diff(tree: Tree, argv: list[str] | None = None):  # type: ignore[no-untyped-def]
    report = tree.run(argv)
    return report, next(r for r in report.results if r.name == "config-diff")


def _without_references(tree: Tree) -> None:
    tree.forget_runs()


def test_a_key_the_program_reads_misspelled_fails_with_did_you_mean(tmp_path: Path) -> None:
    tree = build_clean_tree(tmp_path)
    _without_references(tree)  # a new project: nothing to diff, the program's source alone knows the keys
    tree.write("train.py", READS_ITS_CONFIG)
    tree.write_config("configs/coco_resnet50.yaml", {"batch_szie": 128, "lr": 0.1, "num_workers": 4, "seed": 0})
    report, check = _config_diff(tree)
    assert check.status is CheckStatus.FAILED and "config-diff" in report.blocking_checks
    assert check.finding == "unknown config key batch_szie: did you mean batch_size? (train.py reads it); " \
                            "fix it in coco_resnet50.yaml"
    # the diff that could not run is a warning of its own, never part of the FAIL line
    assert any(line.startswith("also [warn]: not checked: no reference run yet") for line in check.evidence)
    assert check.details["misspelled_keys"] == [{"key": "batch_szie", "meant": "batch_size"}]


def test_a_key_the_reference_has_misspelled_fails_and_is_waivable(tmp_path: Path) -> None:
    tree = build_clean_tree(tmp_path)  # its train.py reads no config key: the reference's keys are the known ones
    changed = intended_config(**{"train.batch_size": None, "train.bacth_size": 32})
    tree.write_config("configs/coco_resnet50.yaml", changed)
    report, check = _config_diff(tree)
    assert check.status is CheckStatus.FAILED
    assert "unknown config key train.bacth_size: did you mean batch_size? (the reference config has it)" in check.finding
    waived = tree.run(["--guard-waive", "config-diff=the trainer reads bacth_size", "train.sh"])
    assert "config-diff" not in waived.blocking_checks
    assert [(w.check, w.reason) for w in waived.waivers] == [("config-diff", "the trainer reads bacth_size")]


def test_keys_that_are_no_typos_pass(tmp_path: Path) -> None:
    tree = build_clean_tree(tmp_path)
    tree.write("train.py", READS_ITS_CONFIG)
    # new keys, unknown to the program and the reference but one typo from none of them
    extra = intended_config(**{"optimizer.beta1": 0.9, "optimizer.beta2": 0.99, "train.warmup": 100,
                               "model.depth": 50})
    tree.write_config("configs/coco_resnet50.yaml", extra)
    _, check = _config_diff(tree)
    assert "unknown config key" not in check.finding and "misspelled_keys" not in check.details
    assert set(REFERENCE) <= set(extra)


@pytest.mark.parametrize(("word", "name", "typo"), [
    ("batch_szie", "batch_size", True), ("bacth_size", "batch_size", True), ("batch_sise", "batch_size", True),
    ("batchsize", "batch_size", True), ("batch_sizes", "batch_size", True), ("seeed", "seed", False),
    ("beta1", "beta2", False), ("beta1", "betas", False), ("layer_3", "layer_4", False),
    ("warmup_steps", "warmup_step1", False), ("lr", "l2", False), ("model", "mode", False),
    ("epoch", "epochs", False), ("steps", "step", False), ("xbatch_size", "batch_size", False),
])
def test_one_typo_is_a_swapped_wrong_missing_or_extra_letter(word: str, name: str, typo: bool) -> None:
    assert _one_typo(word, name) is typo
