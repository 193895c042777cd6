"""The sidecar's reading and judging as plain Python functions: the public API's `read_metrics`, `open_source`
and `judge` (re-exported, lazily, at the package top: `from guarded_sbatch import judge, read_metrics`)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from guarded_sbatch.sources.points import MetricPoint, sanitize_points
from guarded_sbatch.judge.ordered_checks import decide
from guarded_sbatch.judge.history import MetricHistory
from guarded_sbatch.judge.policy import JudgePolicy, RunContext
from guarded_sbatch.judge.verdict import Verdict
from guarded_sbatch.sources.base import MetricSource
from guarded_sbatch.sources.kinds import readable_kinds
from guarded_sbatch.sources.kinds import open_source as _open

__all__ = ["SOURCE_KINDS", "judge", "open_source", "read_history", "read_metrics"]

SOURCE_KINDS = tuple(readable_kinds())  # "wandb", "tensorboard", "mlflow", "csv", "trainer_state", "textlog", ...


def open_source(kind: str, path: str | Path) -> MetricSource:
    """An incremental reader of one run's metrics: `kind` one of SOURCE_KINDS, `path` what the matching
    `monitor` flag takes (a TensorBoard folder or event file, a W&B run folder or .wandb file, a text log,
    an MLflow store, a Lightning metrics.csv). Each `read_new()` returns only the points written since the
    last call; a half-written tail is kept for the next one. Raises SourceError (a GuardedError, with a
    one-line message) for an unknown kind or a path that is not there."""
    return _open(kind, path)


def read_metrics(kind: str, path: str | Path) -> list[MetricPoint]:
    """Every metric point the run's files hold now, as MetricPoint(step, wall_time, key, value), in the
    reader's order (NaN and Inf kept as they are)."""
    return open_source(kind, path).read_new()


def read_history(kind: str, path: str | Path) -> MetricHistory:
    """What the run's files hold now as the judge reads it: every metric point, and every crash the job printed
    (a text log's traceback, CUDA OOM...: events beside the points, not metrics). `judge(read_history(...))` is
    the sidecar's one-shot verdict on those files."""
    history = MetricHistory()
    history.read_from(open_source(kind, path))
    return history


def judge(points: Iterable[MetricPoint] | MetricHistory, policy: JudgePolicy | None = None, *,
          job_live: bool = False) -> Verdict:
    """The sidecar's decision on a history as it stands: CONTINUE, WAIT or STOP, with its reason, message,
    anomalies and last step (a crash the job printed counts when given a `read_history` history). `policy`
    names keys, a baseline or a target when the defaults (found from common
    metric names) do not fit. A finished run's files are judged as they are (job_live=False: no staleness);
    job_live=True judges them as the sidecar does while the job runs."""
    if isinstance(points, MetricHistory):
        history = points
    else:
        kept, _ = sanitize_points(list(points))
        history = MetricHistory.from_points(kept)
    return decide(history, policy, RunContext(job_live=job_live))
