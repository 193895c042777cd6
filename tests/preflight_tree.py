"""Build realistic project trees (configs/, recipes/, experiments/, train.sh, train.py) for pre-flight tests."""

from __future__ import annotations

import os
import shutil
import textwrap
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import yaml

from guarded_sbatch.core.config import Config
from guarded_sbatch.sbatch.argv import split_sbatch_argv
from guarded_sbatch.core.mounts import Mount
from guarded_sbatch.launch.preflight import PreflightReport, run_preflight
from finished_runs import record_finished_run, state_folder

REFERENCE = {
    "dataset": "coco",
    "model": {"name": "resnet50", "pretrained": "weights/r50.pth"},
    "data": {"root": "data/coco", "num_workers": 4},
    "train": {"batch_size": 32, "epochs": 12, "seed": 0, "gradient_accumulation_steps": 1, "output_dir": "runs"},
    "optimizer": {"name": "adamw", "lr": 3e-4, "betas": [0.9, 0.999], "weight_decay": 0.05},
    "precision": "bf16",
}

TRAIN_SH = """\
#!/bin/bash
#SBATCH --job-name=coco-resnet50-bs256-lr3e-4
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=4
#SBATCH --time=04:00:00
#SBATCH --output=logs/%x-%j.out

export WANDB_PROJECT=coco-detection
export WANDB_ENTITY=vision-lab
CONFIG=configs/coco_resnet50.yaml
srun torchrun --nnodes "$SLURM_NNODES" --nproc_per_node 4 \\
    train.py --config "$CONFIG"
"""

TRAIN_PY = """\
import wandb

def main():
    wandb.init(project="coco-detection", name="coco-resnet50-bs256-lr3e-4", tags=["baseline"])
"""

LOCAL_DISK = [Mount("/", "ext4", "/dev/vda")]


@dataclass
class Tree:
    root: Path

    def write(self, relative: str, text: str) -> Path:
        path = self.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def write_config(self, relative: str, data: dict) -> Path:
        return self.write(relative, yaml.safe_dump(data, sort_keys=False))

    def run(
        self,
        argv: list[str] | None = None,
        *,
        config: Config | None = None,
        scheduler: object | None = None,
        env: dict[str, str] | None = None,
        mounts: list[Mount] | None = None,
        now: datetime | None = None,
        restart: bool = False,
    ) -> PreflightReport:
        launch = split_sbatch_argv(argv or ["train.sh"])
        with state_folder(self.state):
            return self._run(launch, config, scheduler, env, mounts, now, restart)

    @property
    def state(self) -> Path:
        """The tree's own state folder (its finished runs), beside it."""
        return self.root.parent / f"{self.root.name}-state"

    def finished_run(self, config: str, **kwargs: object) -> str:
        """A guarded run of the tree's `config` that finished (healthy unless told), as its sidecar leaves it."""
        with state_folder(self.state):
            return record_finished_run(self.root / config, self.root, **kwargs)  # type: ignore[arg-type]

    def forget_runs(self) -> None:
        """No finished run any more (a new project)."""
        shutil.rmtree(self.state, ignore_errors=True)

    def reference_ran(self, config: str = "configs/coco_resnet50_base.yaml") -> None:
        """The reference is a run of `config` as it is now, finished healthy (the tree's only finished run)."""
        self.forget_runs()
        self.finished_run(config)

    def _run(self, launch, config, scheduler, env, mounts, now, restart) -> PreflightReport:  # type: ignore[no-untyped-def]
        return run_preflight(
            launch,
            config or Config(),
            scheduler,  # type: ignore[arg-type]
            cwd=self.root,
            env={"PATH": os.environ.get("PATH", os.defpath), **(env or {})},  # the job's python/torchrun
            mounts=mounts or LOCAL_DISK,
            now=now,
            restart=restart,
        )


def intended_config(**changes: object) -> dict:
    """The reference with dotted-key changes ("train.batch_size": 64); a None value deletes the key."""
    import copy

    data = copy.deepcopy(REFERENCE)
    for dotted, value in changes.items():
        node = data
        parts = dotted.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        if value is None:
            node.pop(parts[-1], None)
        else:
            node[parts[-1]] = value
    return data


def build_clean_tree(root: Path) -> Tree:
    """A project whose launch passes every check (given --guard-seconds-per-epoch)."""
    tree = Tree(root)
    tree.write_config("configs/coco_resnet50_base.yaml", REFERENCE)
    tree.write_config(
        "recipes/imagenet_vit_l.yaml", {"dataset": "imagenet", "model": {"name": "vit-l"}, "optimizer": {"lr": 1e-3}}
    )
    tree.write_config("experiments/old/mnist.yaml", {"dataset": "mnist", "lr": 0.1})
    tree.write_config("configs/coco_resnet50.yaml", intended_config(**{"train.epochs": 12}))
    tree.finished_run("configs/coco_resnet50_base.yaml")  # the reference: a run of it finished healthy
    tree.write("train.sh", TRAIN_SH)
    tree.write("train.py", TRAIN_PY)
    (root / "data/coco").mkdir(parents=True)
    tree.write("weights/r50.pth", "fake weights")
    (root / "logs").mkdir()
    (root / "runs").mkdir()
    return tree


def dedent(text: str) -> str:
    return textwrap.dedent(text)
