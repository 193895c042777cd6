"""A run's name in a loop of launches comes from what its arguments set: the same arguments are the same run (a
restart), other arguments a new run."""

from __future__ import annotations

import pytest

from guarded_sbatch.launch.checks.run_name import named_from_arguments


@pytest.mark.parametrize(("name", "args", "expected"), [
    ("synthetic-tanh-mlp-bs64", ["--lr", "3e-4"], "synthetic-tanh-mlp-bs64-lr3e-4"),
    ("synthetic-tanh-mlp-bs64-lr5e-2", ["--lr=1e-3"], "synthetic-tanh-mlp-bs64-lr1e-3"),  # its own part replaced
    ("coco-resnet50-bs256", ["--batch-size", "128", "--seed", "2"], "coco-resnet50-bs128-seed2"),
    ("coco-resnet50-x", ["lr=0.1", "--weight-decay", "1e-4"], "coco-resnet50-x-lr0.1-wd1e-4"),
    ("coco-resnet50-x", ["--diverge-at", "120", "--logdir", "runs/a"], "coco-resnet50-x"),  # nothing swept
    ("coco-resnet50-x", ["--lr", "nan"], "coco-resnet50-x"),
])
def test_the_arguments_name_the_run(name: str, args: list[str], expected: str) -> None:
    assert named_from_arguments(name, args) == expected
    assert named_from_arguments(name, args) == named_from_arguments(name, list(args))  # the same again: a restart
