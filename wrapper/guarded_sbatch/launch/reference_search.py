"""Find the reference run: the given --guard-reference, or the most similar recent config in the project.

The reference is the user's own: a candidate another user owns (the file, or a link to it) is never chosen, only
named, so that a co-worker's copy of this run's config under experiments/ cannot turn a block into a pass; naming
it with --guard-reference uses it on purpose. Only regular files are read (a link to /dev/zero or a FIFO is not).
"""

from __future__ import annotations

import difflib
import os
import pwd
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guarded_sbatch.core.errors import UsageError
from guarded_sbatch.launch.runconfig import CONFIG_SUFFIXES, RunConfig, load_run_config

RUN_FOLDER_CONFIGS = (
    "config.yaml", "config.yml", "config.json", "config.toml", ".hydra/config.yaml", "hparams.yaml",
    "args.json", "training_args.json", "files/config.yaml", "params.yaml",
)
MODEL_KEYS = ("model.name", "model_name", "arch", "architecture", "model_type", "model", "backbone", "model_name_or_path")
TASK_KEYS = ("task", "task_name", "dataset", "dataset_name", "data.name", "data.dataset", "dataset.name")
MAX_CANDIDATES = 300


@dataclass(frozen=True)
class Reference:
    config: RunConfig
    folder: Path  # where its logs may be
    score: float | None  # None when the user named it
    candidates_seen: int = 0
    logs: tuple[Path, ...] = ()  # its own log files (a guarded run's stdout), for the ETA
    how: str = ""  # how it was chosen, when not by similarity or --guard-reference
    passed_over: tuple[str, ...] = ()  # another user's configs that were more similar, named, never chosen


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
        raise UsageError(f"reference {path} does not exist; give a config file or a run folder")
    return load_run_config(path)


def find_candidates(
    roots: list[Path], dirs: tuple[str, ...], max_depth: int, max_age_days: float, exclude: set[Path],
    foreign: list[tuple[Path, str]] | None = None,
) -> list[Path]:
    """The recent config files under the reference folders that are the user's own; another user's are added to
    `foreign` (with whose they are) instead."""
    cutoff = time.time() - max_age_days * 86400
    found: list[Path] = []
    seen: set[Path] = set()
    for root in roots:
        for folder_name in dirs:
            top = root / folder_name
            if not top.is_dir():
                continue
            base_depth = len(top.parts)
            for current, subdirs, files in os.walk(top):
                depth = len(Path(current).parts) - base_depth
                if depth >= max_depth:
                    subdirs[:] = []
                subdirs[:] = [d for d in subdirs if not d.startswith(".") or d == ".hydra"]
                for name in files:
                    path = Path(current) / name
                    owner = _candidate(path, cutoff, exclude, seen) if path.suffix.lower() in CONFIG_SUFFIXES else None
                    if owner and foreign is not None:
                        foreign.append((path, owner))
                    elif owner == "":
                        found.append(path)
                    if len(found) >= MAX_CANDIDATES:
                        return found
    return found


def _candidate(path: Path, cutoff: float, exclude: set[Path], seen: set[Path]) -> str | None:
    """"" for a recent regular config file of the user's own (the link naming it too), the owner's name for
    another user's, None for anything else (not a regular file, too old, excluded, seen already)."""
    try:
        resolved = path.resolve()
        link, target = os.lstat(path), os.stat(path)
    except OSError:
        return None
    if resolved in exclude or resolved in seen or not stat.S_ISREG(target.st_mode) or target.st_mtime < cutoff:
        return None
    seen.add(resolved)
    for info in (link, target):
        if info.st_uid != os.geteuid():
            try:
                return pwd.getpwuid(info.st_uid).pw_name
            except KeyError:
                return f"uid {info.st_uid}"
    return ""


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


def select_reference(
    intended: RunConfig | None,
    roots: list[Path],
    dirs: tuple[str, ...],
    max_depth: int,
    max_age_days: float,
    deadline_s: float,
    passed_over: list[str] | None = None,
) -> Reference | None:
    """The most similar recent candidate of the user's own; the search gives up after deadline_s (a hung mount).
    Another user's candidates that would have been chosen are named in `passed_over` (and the Reference's)."""
    if intended is None:
        return None
    exclude = {p.resolve() for p in intended.files}
    box: dict[str, Any] = {}

    def search() -> None:
        foreign: list[tuple[Path, str]] = []
        candidates = find_candidates(roots, dirs, max_depth, max_age_days, exclude, foreign)
        best = _most_similar(intended, [(path, "") for path in candidates])
        rivals = _most_similar(intended, foreign[:MAX_FOREIGN], every=True)
        named = [f"{path} is {owner}'s (similarity {score:.2f}): another user's config is the reference only when "
                 "named as such" for score, config, path, owner in rivals if best is None or score > best[0]]
        box["result"] = (best, len(candidates), named)

    worker = threading.Thread(target=search, daemon=True, name="reference-search")
    worker.start()
    worker.join(deadline_s)
    if "result" not in box:
        return None
    best, seen, named = box["result"]
    if passed_over is not None:
        passed_over.extend(named)
    if best is None:
        return None
    score, config, _, _ = best
    return Reference(config, config.path.parent if config.path else Path("."), score, seen, passed_over=tuple(named))


MAX_FOREIGN = 20  # another user's candidates loaded to say whether one would have been chosen


def _most_similar(intended: RunConfig, candidates: list[tuple[Path, str]], *, every: bool = False) -> Any:
    """The best (score, config, path, owner) of the candidates, or with `every` all of them with a score."""
    scored = []
    for path, owner in candidates:
        try:
            loaded = load_run_config(path)
        except UsageError:
            continue
        score = similarity(intended, loaded)
        if score > 0:
            scored.append((score, loaded, path, owner))
    if every:
        return sorted(scored, key=lambda item: -item[0])
    return max(scored, key=lambda item: item[0], default=None)
