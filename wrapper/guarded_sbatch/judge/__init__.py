"""The pure decision core: a verdict from the metric history alone.

    from guarded_sbatch.judge import MetricHistory, decide, JudgePolicy, RunContext
"""

from guarded_sbatch.judge.decide import decide, describe
from guarded_sbatch.judge.history import MetricHistory
from guarded_sbatch.core.judge_policy import JudgePolicy, RunContext
from guarded_sbatch.judge.verdict import Anomaly, Decision, Reason, Verdict

__all__ = [
    "Anomaly", "Decision", "JudgePolicy", "MetricHistory", "Reason", "RunContext", "Verdict", "decide", "describe",
]
