"""A STOP of one of a sweep agent's W&B runs (sidecar/tracker_runs.py): that run's process and its children are
stopped, its evidence is kept apart (`evidence/<W&B run id>/`), and it is judged no more; the job and the watch go
on with the agent's next run."""

from __future__ import annotations

from dataclasses import replace

from guarded_sbatch.judge.verdict import Verdict
from guarded_sbatch.sidecar.plan import WatchPlan
from guarded_sbatch.sidecar.source_set import SourceSet
from guarded_sbatch.sidecar.stop_record import save_evidence
from guarded_sbatch.sidecar.tracker_runs import stop_process_tree


def stop_one_run(settings: WatchPlan, sources: SourceSet, verdict: Verdict, *, data_source: str,
                 pid: int) -> str:
    """Stop one agent run's process, keep its evidence apart, retire it; the line that says what was done."""
    run = sources.describe()
    _, detail = stop_process_tree(pid, grace_s=settings.stop_grace_s)
    folder = settings.evidence_dir / "".join(c if c.isalnum() or c in "-_." else "_" for c in run.rsplit("/", 1)[-1])
    try:
        evidence, _ = save_evidence(replace(settings, evidence_dir=folder), sources, verdict, data_source=data_source,
                                    stop_detail=detail)
    except Exception as exc:  # noqa: BLE001 - the run is stopped already; say what went wrong
        evidence = f"not written ({exc})"
    sources.retire_active()
    return f"sidecar: stop of W&B run {run} done: {detail}; evidence {evidence}; the job goes on\n"
