"""The pure decision core: a verdict from the metric history alone.

    from guarded_sbatch.judge import MetricHistory, decide, JudgePolicy, RunContext

Names are imported when first used: the launch reads the judge's policy types (`judge/policy.py`, `judge/table.py`,
to check and record a run's `[judge]` settings) without loading the decision core and numpy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for type checkers only; at run time __getattr__ imports on first use
    from guarded_sbatch.judge.ordered_checks import decide, describe
    from guarded_sbatch.judge.history import MetricHistory
    from guarded_sbatch.judge.policy import JudgePolicy, RunContext
    from guarded_sbatch.judge.verdict import Anomaly, Decision, Reason, Verdict

# name -> the module that defines it
_LAZY = {
    "decide": "guarded_sbatch.judge.ordered_checks",
    "describe": "guarded_sbatch.judge.ordered_checks",
    "MetricHistory": "guarded_sbatch.judge.history",
    "JudgePolicy": "guarded_sbatch.judge.policy",
    "RunContext": "guarded_sbatch.judge.policy",
    "Anomaly": "guarded_sbatch.judge.verdict",
    "Decision": "guarded_sbatch.judge.verdict",
    "Reason": "guarded_sbatch.judge.verdict",
    "Verdict": "guarded_sbatch.judge.verdict",
}

__all__ = [
    "Anomaly", "Decision", "JudgePolicy", "MetricHistory", "Reason", "RunContext", "Verdict", "decide", "describe",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'guarded_sbatch.judge' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next access is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
