"""Every kind of metric source, in one table: its name, its `monitor` flag, its place in the priority order,
its report label and how to open one at a path.

A new source is one module in sources/ implementing MetricSource and one line in KINDS below: `monitor` and
`sidecar` get its flag, the sidecar opens and ranks it, the report labels it. `register()` adds a kind at run
time (tests/test_source_registry.py adds a JSON-lines source that way).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from guarded_sbatch.sources.base import MetricSource, SourceError
from guarded_sbatch.sources.csvlog import LightningCsvSource
from guarded_sbatch.sources.mlflow import MlflowSource
from guarded_sbatch.sources.tensorboard import TensorBoardSource
from guarded_sbatch.sources.textlog import TextLogSource, TrainerStateSource
from guarded_sbatch.sources.wandb_api import WandbApiSource
from guarded_sbatch.sources.wandb_log import WandbLogSource, find_wandb_file


@dataclass(frozen=True)
class SourceKind:
    name: str  # MetricSource.kind of what `open` returns
    flag: str | None  # the monitor/sidecar flag naming a path of this kind; None: found by discovery only
    help: str
    priority: int  # lower is judged first when several sources of a run have data
    label: str  # the report's "Data source" value while this kind is judged
    open: Callable[[Path], MetricSource]  # given the path (or, without needs_existing_path, the text as given)
    needs_existing_path: bool = True


def _open_wandb(spec: Path | str) -> MetricSource:
    text = str(spec)  # a URL must not pass through Path (it would fold "//")
    target = Path(text)
    if "://" in text or not target.exists():
        return WandbApiSource(text)  # a run URL or entity/project/id, read through the online API
    if find_wandb_file(target) is None:
        raise SourceError(f"no run-*.wandb log under {target}; give the run folder, wandb/ or the .wandb file")
    return WandbLogSource(target)


def _open_textlog(target: Path) -> MetricSource:
    return TrainerStateSource(target) if target.name == "trainer_state.json" else TextLogSource(target)


KINDS: dict[str, SourceKind] = {}


def register(kind: SourceKind) -> SourceKind:
    KINDS[kind.name] = kind
    return kind


for _kind in (
    SourceKind("wandb", "--wandb", "W&B run folder, .wandb file, or run path/URL", 0, "wandb_ok", _open_wandb,
               needs_existing_path=False),
    SourceKind("tensorboard", "--tb", "TensorBoard event folder or file", 1, "tensorboard_ok", TensorBoardSource),
    SourceKind("mlflow", "--mlflow", "MLflow store (mlflow.db or mlruns/)", 2, "log_fallback", MlflowSource),
    SourceKind("csv", "--csv", "Lightning CSVLogger metrics.csv", 2, "log_fallback", LightningCsvSource),
    SourceKind("trainer_state", None, "HF trainer_state.json", 2, "log_fallback", TrainerStateSource),
    SourceKind("textlog", "--log", "a text log of the run", 3, "log_fallback", _open_textlog),
):
    register(_kind)


def open_source(kind: str, path: str | Path) -> MetricSource:
    """A source of a named kind at a path the user gave (`--tb`, `--wandb`, `--log`, ...)."""
    found = KINDS.get(kind)
    if found is None:
        raise SourceError(f"unknown source kind {kind!r}: use one of {', '.join(KINDS)}")
    target = Path(path)
    if found.needs_existing_path and not target.exists():
        raise SourceError(f"{kind} source {target} does not exist; check the path")
    return found.open(target if found.needs_existing_path else path)  # type: ignore[arg-type]


def priority(kind: str) -> int:
    found = KINDS.get(kind)
    return found.priority if found is not None else 9


def label(kind: str | None) -> str:
    found = KINDS.get(kind) if kind is not None else None
    return found.label if found is not None else "unreachable"


def flagged_kinds() -> list[SourceKind]:
    """The kinds a user can name on the command line, with their flags."""
    return [kind for kind in KINDS.values() if kind.flag]
