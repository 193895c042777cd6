"""The folders each guarded run calls its own (its record's TensorBoard and W&B paths and the places its launch
resolved), which a neighbour's discovery never takes. Read from the run records at most once per CACHE_S per
process: one watcher process reads many runs (an array's watcher, 256 tasks), and every run asks for its
neighbours' claims at each read; re-reading every record for each of them was N x N record loads per poll
(64 tasks: 14 s of CPU for two polls)."""

from __future__ import annotations

import os
import time

from guarded_sbatch.core.fsutil import read_json
from guarded_sbatch.records.registry import runs_root
from guarded_sbatch.sources.run_sources import RunSources

CACHE_S = 5.0  # a record changed since (not a new one) is read this much later at most
_cache: dict[str, tuple[float, list[tuple[str, list[str]]]]] = {}


def claimed_by_others(job_id: str | None) -> list[str]:
    """The places every other guarded run (not `job_id`'s) calls its own."""
    return [place for owner, places in _claims() if owner != job_id for place in places]


def _claims() -> list[tuple[str, list[str]]]:
    root = runs_root()
    now = time.monotonic()
    try:
        key = f"{root}@{os.stat(root).st_mtime_ns}"  # a run created since (a new folder) is read at once
    except OSError:
        return []
    hit = _cache.get(key)
    if hit is not None and now - hit[0] < CACHE_S:
        return hit[1]
    claims: list[tuple[str, list[str]]] = []
    try:
        names = sorted(os.listdir(root))
    except OSError:
        names = []
    for name in names:
        raw = read_json(root / name / "run.json", own=True)  # only the user's own records (as list_runs)
        if not isinstance(raw, dict) or not raw.get("job_id"):
            continue
        sources = RunSources.from_json(raw.get("sources"))
        places = [*_strings(raw.get("tb_paths")), *_strings(raw.get("wandb_paths")),
                  *(sources.claimed_folders() if sources is not None else [])]
        claims.append((str(raw["job_id"]), places))
    _cache.clear()  # one root (and one version of it) at a time
    _cache[key] = (now, claims)
    return claims


def _strings(value: object) -> list[str]:
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []
