"""The watcher's half of UNGUARDED (judge/unguarded.py has the words): the time condition, which the pure judge
does not know. A running job with no judged loss after `unguarded_after_s` (config sidecar.unguarded_after_seconds,
kept in the run's record) is UNGUARDED — its log has training lines the guard cannot read, or it has found no
source at all — and the message names what was seen and the one option that fixes it. Before that it is start-up
(too_early), the judge's findings named. A watch with no job (a file read by hand) takes the judge's word as is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from guarded_sbatch.core.waiting import elapsed_text
from guarded_sbatch.judge import unguarded
from guarded_sbatch.judge.history import MetricHistory
from guarded_sbatch.judge.verdict import Decision, Reason, Verdict
from guarded_sbatch.scheduler.interface import JobState
from guarded_sbatch.core.config import recorded_sidecar
from guarded_sbatch.sidecar.state import SidecarState

if TYPE_CHECKING:
    from guarded_sbatch.records.registry import RunRecord
    from guarded_sbatch.sidecar.source_set import SourceSet

BLIND = frozenset({Reason.NO_DATA, Reason.TOO_EARLY, Reason.UNGUARDED})


@dataclass(frozen=True)
class Fixes:
    """The options that make a blind run judged: one naming the loss, one naming the source."""

    key: str
    source: str


LAUNCH_FIXES = Fixes("--guard-loss-key", "--guard-log FILE")  # a guarded run: relaunch with (sbatch/guard_options.py)
WATCH_FIXES = Fixes(unguarded.KEY_FLAG, "--log FILE")  # a watch started by hand (monitor)


def no_loss_judged(verdict: Verdict, history: MetricHistory) -> bool:
    """A WAIT for want of a loss: no training loss with points (a named key never logged counts as none) and no
    evaluation metric."""
    if verdict.decision is not Decision.WAIT or verdict.reason not in BLIND:
        return False
    keys = (verdict.summary or {}).get("keys") or {}
    loss = keys.get("train_loss")
    return not (loss and len(history.series(loss)[0])) and not keys.get("key_metric")


def watched_verdict(verdict: Verdict, history: MetricHistory, *, running_for: float | None, after_s: float,
                    fixes: Fixes, where: str, found: str) -> Verdict:
    """`verdict` with the time condition applied: UNGUARDED once the job has run `after_s` with no judged loss,
    start-up before. `where`: the judged source; `found`: what was looked at when nothing could be read."""
    if not no_loss_judged(verdict, history):
        return verdict
    seen = len(history) > 0
    if running_for is None or running_for < after_s:
        if verdict.reason is not Reason.UNGUARDED:
            return verdict
        message = (f"no training loss judged yet: {unguarded.unread_message(history, fixes.key, where=where)}; "
                   f"unguarded if none is judged by {elapsed_text(after_s)} of running")
        return _replaced(verdict, Reason.TOO_EARLY, message)
    if seen:
        message = unguarded.unread_message(history, fixes.key, where=where)
        if verdict.summary.get("keys", {}).get("train_loss"):  # named, never logged
            message += f" (the loss named, {verdict.summary['keys']['train_loss']}, is not among them)"
    else:
        message = unguarded.no_source_message(found, fixes.source)
    return _replaced(verdict, Reason.UNGUARDED, f"no training loss judged after {elapsed_text(running_for)} of "
                                                f"running: {message}")


def _replaced(verdict: Verdict, reason: Reason, message: str) -> Verdict:
    return Verdict(Decision.WAIT, reason, message, verdict.anomalies, verdict.last_step, verdict.summary)


def found_text(files: list[str]) -> str:
    """What a watcher that read nothing looked at."""
    if not files:
        return "nothing to read was found (no log, TensorBoard, W&B or metrics file)"
    shown = ", ".join(files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
    return f"no metric in what it found ({shown}) and no TensorBoard, W&B or metrics file"


def recorded_verdict(record: RunRecord, sources: SourceSet, verdict: Verdict, now: float) -> Verdict:
    """A guarded run judged again (`show`) with its sidecar's time condition: from when its sidecar saw it running."""
    since = SidecarState.load(record.sidecar_state_file).running_since
    return watched_verdict(verdict, sources.history(), running_for=now - since if since else None,
                           after_s=_recorded_after(record), fixes=LAUNCH_FIXES, where=sources.describe(),
                           found=found_text(sources.files_inspected()))


def sidecar_verdict(sidecar: Any, verdict: Verdict, now: float, new_points: int) -> Verdict:
    """The sidecar loop's verdict with the time condition: the job counts as running from the first poll that saw
    it RUNNING or brought new points (kept in its state across restarts)."""
    settings, state = sidecar.settings, sidecar.state
    if settings.job_id is None:
        return verdict  # nothing says how long it has been running
    if not state.running_since and (sidecar.job_state is JobState.RUNNING or new_points):
        state.running_since = now
    running_for = now - state.running_since if state.running_since else None
    sources = sidecar.sources
    return watched_verdict(verdict, sources.history(), running_for=running_for, after_s=settings.sidecar.unguarded_after_s,
                           fixes=LAUNCH_FIXES if settings.identity is not None else WATCH_FIXES,
                           where=sources.describe(), found=found_text(sources.files_inspected()))


def _recorded_after(record: RunRecord) -> float:
    """The UNGUARDED time the run was launched with: its record's sidecar settings (the schema's default if none)."""
    watch = record.watch if isinstance(record.watch, dict) else {}
    table = watch.get("sidecar")
    return recorded_sidecar(table if isinstance(table, dict) else {}).unguarded_after_s
