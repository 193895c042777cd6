"""A log that ends in a fatal error (traceback, CUDA OOM, NCCL timeout, fp16 scale at its minimum...):
the run is dead or dying, so there is nothing to keep alive. The text-log reader reports the crash
as a point with a crash key (sources.base.crash_key): 1.0 while it is the log's last word."""

from __future__ import annotations

from guarded_sbatch.judge.findings import Finding
from guarded_sbatch.judge.history import MetricHistory
from guarded_sbatch.judge.verdict import Anomaly, Reason
from guarded_sbatch.core.points import split_crash_key


def is_crash_key(key: str) -> bool:
    return split_crash_key(key) is not None


def check_crashed(history: MetricHistory) -> Finding | None:
    latest: tuple[int, str, str] | None = None
    for key in history.keys():
        parts = split_crash_key(key)
        if parts is None:
            continue
        steps, values = history.series(key)
        if not len(values) or values[-1] != 1.0:
            continue  # training went on after it (a requeued or resumed run)
        if latest is None or int(steps[-1]) >= latest[0]:
            latest = (int(steps[-1]), *parts)
    if latest is None:
        return None
    step, exception, evidence = latest
    return Finding.stop(Reason.CRASHED, f"crashed: {exception}", Anomaly("crashed", "log", step, None, evidence))
