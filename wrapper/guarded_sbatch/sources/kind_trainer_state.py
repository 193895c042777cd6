"""HF Trainer's `trainer_state.json` (its log_history) as a source kind: found under a folder only (the one
written since the run started, in the output folder or a checkpoint-N/), read whole at each poll."""

from __future__ import annotations

from pathlib import Path

from guarded_sbatch.sources.base import MetricSource
from guarded_sbatch.sources.kind_base import Finds, SourceKind, is_file_named


def _open(path: Path) -> MetricSource:
    from guarded_sbatch.sources.textlog import TrainerStateSource  # noqa: PLC0415  lazy (see kind_base.py)

    return TrainerStateSource(path)


KIND = SourceKind("trainer_state", None, "HF trainer_state.json", 2, "trainer_state_ok", _open,
                  finds=Finds("trainer_state.json", file=is_file_named("trainer_state.json")))
