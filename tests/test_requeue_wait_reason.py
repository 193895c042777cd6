"""A requeued job waiting for its restart is `WAIT interrupted`, not `WAIT crashed`: slurmstepd's line about the requeue
(`CANCELLED ... DUE TO JOB REQUEUE`) in its log is an interruption from outside, confirmed or not yet."""

from __future__ import annotations

from pathlib import Path

from guarded_sbatch.judge import Decision, decide
from guarded_sbatch.sources.points import CrashState
from guarded_sbatch.sources.textlog import TextLogSource
from package_extras import history_read

REQUEUE = "slurmstepd: error: *** JOB 812 ON node1 CANCELLED AT 2026-12-06T05:21:10 DUE TO JOB REQUEUE ***\n"


def test_a_requeue_in_the_log_is_an_interruption_while_it_waits(tmp_path: Path) -> None:
    log = tmp_path / "slurm-812.out"
    log.write_text("".join(f"step {s} loss {2.0 / (1 + s / 100):.4f}\n" for s in range(10, 210, 10)) + REQUEUE)
    history = history_read(TextLogSource(log))
    (event,) = history.crashes()
    for state in (CrashState.PRINTED, CrashState.CONFIRMED):  # before the silence confirms it, and after
        history.put_crash(event.__class__(event.step, event.exception, event.evidence, state))
        verdict = decide(history)
        assert (verdict.decision, verdict.reason.value) == (Decision.WAIT, "interrupted"), verdict.message
