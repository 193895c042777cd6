"""The reference run: its model, a named --guard-reference read (a config file or a run folder), and how alike two
configs are. The reference is chosen among the user's own guarded runs that finished healthy
(launch/run_reference.py `healthy_reference`), never among files found in the project, so a co-worker's copy of
this run's config under experiments/ (or the user's own config that never ran healthy) cannot turn a block into a
pass; naming a file with --guard-reference uses it on purpose.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guarded_sbatch.core.errors import UsageError
from guarded_sbatch.launch.runconfig import CONFIG_SUFFIXES, RunConfig, load_run_config, not_a_file

RUN_FOLDER_CONFIGS = (
    "config.yaml", "config.yml", "config.json", "config.toml", ".hydra/config.yaml", "hparams.yaml",
    "args.json", "training_args.json", "files/config.yaml", "params.yaml",
)
MODEL_KEYS = ("model.name", "model_name", "arch", "architecture", "model_type", "model", "backbone", "model_name_or_path")
TASK_KEYS = ("task", "task_name", "dataset", "dataset_name", "data.name", "data.dataset", "dataset.name")


@dataclass(frozen=True)
class Reference:
    config: RunConfig
    folder: Path  # where its logs may be
    score: float | None  # None when the user named it
    candidates_seen: int = 0
    logs: tuple[Path, ...] = ()  # its own log files (a guarded run's stdout), for the ETA
    tb_dirs: tuple[Path, ...] = ()  # its TensorBoard folders: their wall times pace it when no log does (the ETA)
    how: str = ""  # how it was chosen, when not by --guard-reference


def reference_from_path(path: Path) -> RunConfig:
    """--guard-reference: a config file, or a run folder holding one."""
    if path.is_dir():
        for name in RUN_FOLDER_CONFIGS:
            if (path / name).is_file():
                return load_run_config(path / name)
        inside = sorted(p for p in path.iterdir() if p.suffix in CONFIG_SUFFIXES and p.is_file())
        if len(inside) == 1:
            return load_run_config(inside[0])
        raise UsageError(f"reference folder {path} holds no single run config (config.yaml, hparams.yaml, ...); name the file")
    if not path.is_file():
        raise UsageError(f"reference {path} {not_a_file(path)}; give a config file or a run folder")
    return load_run_config(path)


def similarity(intended: RunConfig, candidate: RunConfig) -> float:
    keys_a, keys_b = set(intended.values), set(candidate.values)
    shared = keys_a & keys_b
    if not shared:
        return 0.0
    jaccard = len(shared) / len(keys_a | keys_b)
    agree = sum(1 for k in shared if intended.values[k] == candidate.values[k]) / len(shared)
    score = 0.35 * jaccard + 0.25 * agree
    score += 0.15 * _same(intended, candidate, MODEL_KEYS) + 0.15 * _same(intended, candidate, TASK_KEYS)
    if intended.path is not None and candidate.path is not None:
        score += 0.10 * difflib.SequenceMatcher(None, intended.path.stem, candidate.path.stem).ratio()
    return round(score, 4)


def _same(a: RunConfig, b: RunConfig, keys: tuple[str, ...]) -> float:
    found_a, found_b = a.find(keys), b.find(keys)
    if found_a is None or found_b is None:
        return 0.0
    return 1.0 if _family(found_a[1]) == _family(found_b[1]) else 0.0


def _family(value: Any) -> str:
    """'resnet50' and 'resnet101' are one family; 'ViT-L/16' -> 'vit'."""
    text = str(value).lower().rsplit("/", 1)[-1]
    letters = "".join(ch if ch.isalpha() else " " for ch in text).split()
    return letters[0] if letters else text
