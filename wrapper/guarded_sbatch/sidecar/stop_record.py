"""What a STOP leaves behind once the run is stopped: the evidence bundle (the verdict, every series, the files read,
the job's log) and the project note. A failure of either is named and never prevents the other or the
FINAL_SUMMARY."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from guarded_sbatch.actions.evidence import write_evidence
from guarded_sbatch.actions.notes import append_project_note
from guarded_sbatch.core.errors import GuardedError
from guarded_sbatch.core.timefmt import local_timestamp
from guarded_sbatch.judge.verdict import Decision, Reason, Verdict
from guarded_sbatch.sidecar.plan import WatchPlan
from guarded_sbatch.sidecar.source_set import SourceSet
from guarded_sbatch.sidecar.state import SidecarState, share_stop


def save_evidence(settings: WatchPlan, sources: SourceSet, verdict: Verdict, *, data_source: str,
                  stop_detail: str) -> tuple[str | None, Path | None]:
    """Write the evidence bundle; (its JSON path, its plot) — raises what went wrong, for the caller to name."""
    history = sources.history()
    series = {key: tuple(map(list, history.series(key))) for key in history.keys()}
    bundle = write_evidence(
        settings.evidence_dir, verdict, series,  # type: ignore[arg-type]
        run={"name": settings.run_name, "job_id": settings.job_id, "data_source": data_source,
             "source": sources.describe()},
        files_inspected=sources.files_inspected(), log_path=sources.stdout_path(), stop_detail=stop_detail,
        plot=settings.sidecar.evidence_plot,
    )
    return str(bundle.json_path), bundle.plot_path


def append_stop_note(settings: WatchPlan, verdict: Verdict, *, stop_detail: str,
                     evidence_path: str | None) -> str:
    """Append the STOP to the project's notes file; what became of it, for the FINAL_SUMMARY."""
    if settings.notes_path is None:
        return "not configured"
    note = (f"### {settings.run_name}: STOP ({verdict.reason.value})\n"
            f"- {verdict.message}\n- step {verdict.last_step}; {stop_detail}\n- evidence: {evidence_path}")
    try:
        append_project_note(settings.notes_path, note)
    except GuardedError as exc:
        return f"FAILED: {exc}"
    return f"appended to {settings.notes_path}"


def stopped_before(settings: WatchPlan, state: SidecarState) -> str:
    """Who stopped this run before this watcher process could ("" if nobody): another watcher of it (a foreground
    `monitor --job` whose STOP the sidecar took in, or, for that monitor, the run's own sidecar) or an earlier
    process of this one, ended before it could finish."""
    if state.stop_by:
        when = local_timestamp(state.stop_requested_at, seconds=True)
        return f"stopped at {when} by {state.stop_by}: {state.stop_detail or 'it has not said what its stop did'}"
    if state.stop_requested_at:
        return f"stop requested already at {state.stop_requested_at:.0f} by an earlier watcher process"
    if settings.run_state_file is not None:
        run = SidecarState.load(settings.run_state_file)
        if run.stop_requested_at and run.last_decision == "STOP":
            when, who = local_timestamp(run.stop_requested_at, seconds=True), run.stop_by or "the run's own sidecar"
            return f"stopped at {when} by {who}"
    return ""


def share_stop_of(settings: WatchPlan, state: SidecarState, verdict: Verdict, say: Callable[[str], None]) -> None:
    """A watcher that is not the run's sidecar saves its STOP into the run's own state too (sidecar/state.py)."""
    path = settings.run_state_file
    if path is None:
        return
    try:
        share_stop(path, state, settings.watcher or "another watcher")
    except (OSError, GuardedError) as exc:
        say(f"sidecar: could not save the STOP ({verdict.reason.value}) into the run's state {path}: {exc}\n")


# the longest another watcher's stop may take (its cancel retried while the scheduler does not answer, its grace)
OTHER_STOP_S = 600.0


def stop_of_another(settings: WatchPlan, state: SidecarState, job_ended: bool, now: float,
                    say: Callable[[str, int], None]) -> Verdict | None:
    """The STOP another watcher of this run made (taken into `state`), to be told as the run's once the job has ended
    and that watcher said what its stop did (or stayed silent well past its grace); None while it is under way. A
    job still running long after that stop was asked did not stop: the claim is dropped, this watcher guards it."""
    silent_for = now - state.stop_requested_at
    if not job_ended and silent_for >= OTHER_STOP_S:
        say(f"{state.stop_by} asked to stop job {settings.job_id} {silent_for:.0f} s ago and it still runs: this "
            "sidecar guards it again\n", logging.WARNING)
        state.stop_by, state.stop_requested_at, state.stop_detail = "", 0.0, ""
        state.save(settings.state_file, take_shared=False)
        return None
    if not job_ended or (not state.stop_detail and silent_for < 3 * settings.stop_grace_s + 60):
        return None
    try:
        reason = Reason(state.last_reason)
    except ValueError:
        reason = Reason.DIVERGENCE
    return Verdict(Decision.STOP, reason, state.last_message, last_step=state.last_step)
