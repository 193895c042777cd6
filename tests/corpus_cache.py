"""The labelled corpus (examples/corpus/generate.py), written once per test session and shared by the test files that
read it (test_corpus_dense, test_corpus_scoring, test_corpus_sources): each run's files are written by the real
writers (TensorBoard's SummaryWriter, the text log, a real W&B offline run where asked for) the first time a file
asks for that run, then read by every file that asks again.

The folder is the session's (under the pytest base folder that its xdist workers share) and named by the generator's
source, so an edit of the generator is a new corpus. A run asked for with its W&B run is written into its own folder
(runs are never rewritten while another file may read them); a run asked for without W&B reuses either. Workers
generate under one lock, so a run is written once."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import sys
from collections.abc import Collection
from pathlib import Path

import pytest

GENERATOR = Path(__file__).resolve().parents[1] / "examples" / "corpus"
sys.path.insert(0, str(GENERATOR))
import generate as corpus  # noqa: E402 - after the sys.path line above


def _source_key() -> str:
    digest = hashlib.sha256()
    for path in sorted(GENERATOR.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def _session_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # xdist: base/<worker> per worker


def _labels(path: Path) -> corpus.RunLabels:
    data = json.loads(path.read_text(encoding="utf-8"))
    data["reasons"] = tuple(data["reasons"])
    if data["wait_expected_at"] is not None:
        data["wait_expected_at"] = tuple(data["wait_expected_at"])
    return corpus.RunLabels(**data)


def corpus_runs(tmp_path_factory: pytest.TempPathFactory, *, wandb: Collection[str] = ()) -> dict[str, corpus.RunLabels]:
    """Every run of the corpus, by name; those named in `wandb` with their W&B offline run."""
    folder = _session_root(tmp_path_factory) / f"corpus-{_source_key()}"
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    with (folder / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for name in corpus.CORPUS:
            with_wandb, plain = folder / "with-wandb" / name / "labels.json", folder / "plain" / name / "labels.json"
            if with_wandb.is_file():
                out[name] = _labels(with_wandb)
            elif name not in wandb and plain.is_file():
                out[name] = _labels(plain)
            else:
                out[name] = corpus.generate_run(name, (with_wandb if name in wandb else plain).parents[1],
                                                wandb=name in wandb)
    return out
