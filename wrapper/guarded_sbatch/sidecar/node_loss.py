"""A run of the watched job that ended because a node died: the cluster's fault, not the training's.

When the job leaves RUNNING for the queue (Slurm requeued it) or ends NODE_FAIL, the sidecar asks the scheduler
which of the job's runs ended NODE_FAIL and says so once per run, naming the nodes that are down. Nothing is
stopped for it and no verdict changes: the metrics alone decide. Accounting may record the lost run a moment
after squeue shows the new state, so the question is asked at a few job polls before it is given up.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from guarded_sbatch.scheduler.interface import JobState, NodeLoss

_RAN = frozenset({JobState.RUNNING.value, JobState.COMPLETING.value})
# what a job that lost a node is next: back in the queue (--requeue) or ended NODE_FAIL
_AFTER_A_NODE_DIED = frozenset({JobState.PENDING, JobState.REQUEUED, JobState.NODE_FAIL})
ASKS = 6


class NodeLossWatch:
    def __init__(self, job_id: str | None) -> None:
        self.job_id = job_id
        self.told = 0  # runs lost with a node, said once each
        self.asks_left = 0

    def after_poll(self, node_losses: Callable[[str], list[NodeLoss]], previous: str, state: JobState) -> Iterator[str]:
        """Lines to report after a job poll that went from `previous` (a JobState value) to `state`; `node_losses`:
        the scheduler's (or a watcher of several runs', which answers none: its one query is all it asks)."""
        if self.job_id is None:
            return
        if previous in _RAN and state in _AFTER_A_NODE_DIED:
            self.asks_left = ASKS
        if not self.asks_left or state is JobState.UNKNOWN:
            return
        self.asks_left -= 1
        losses = node_losses(self.job_id)
        if len(losses) > self.told:
            self.asks_left = 0
        then = ("the job was not requeued (submit it with --requeue to have Slurm run it again)"
                if state is JobState.NODE_FAIL else "Slurm requeued the job: the watch follows its next run")
        for loss in losses[self.told:]:
            yield f"{loss.describe(self.job_id)}: a dead node, not the training; nothing is stopped for it; {then}\n"
        if state is JobState.NODE_FAIL and len(losses) <= self.told:  # the last poll: accounting has not caught up
            yield f"job {self.job_id} ended NODE_FAIL: a node died, not the training; {then}\n"
        self.told = max(self.told, len(losses))
