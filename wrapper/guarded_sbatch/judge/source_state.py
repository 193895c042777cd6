"""The rule for sources that cannot be read: never a STOP because data could not be read.

`judge(history, policy, context, sources)` is what a watcher calls: `decide` on the history, then this rule.
With nothing read and a read error: WAIT (source unreadable). With the judged source unreadable now and no
STOP in what was read before: WAIT, naming the error and the step judged up to. A STOP found in what was
read before stands (a run that is clearly broken is not let off because its log vanished). A history that
dropped series at its cap (judge/history.py) turns a CONTINUE into a WAIT naming the cap. A STOP read from files a
co-worker can write becomes a WAIT naming them and the fix (docs/threat-model.md), and so does a CONTINUE there that
follows an anomaly (appended records may mask a broken run); holes skipped in the judged files
turn a CONTINUE into a WAIT naming them.
"""

from __future__ import annotations

from dataclasses import dataclass

from guarded_sbatch.core.file_trust import FIX
from guarded_sbatch.judge.ordered_checks import decide
from guarded_sbatch.judge.history import MetricHistory
from guarded_sbatch.judge.policy import JudgePolicy, RunContext
from guarded_sbatch.judge.verdict import Decision, Reason, Verdict


@dataclass(frozen=True)
class SourceReadState:
    read_error: str = ""  # why nothing at all could be read at this poll ("" when something was)
    active_error: str = ""  # why the source being judged could not be read at this poll
    untrusted: str = ""  # who else can write the judged files (core/file_trust.py): never the sole ground of a STOP
    damaged: str = ""  # holes skipped in the judged files: never called healthy


def judge(
    history: MetricHistory,
    policy: JudgePolicy | None,
    context: RunContext | None,
    sources: SourceReadState = SourceReadState(),
) -> Verdict:
    verdict = decide(history, policy or JudgePolicy(), context)
    if not len(history) and sources.read_error:
        return Verdict(Decision.WAIT, Reason.SOURCE_UNREADABLE, f"no metrics could be read: {sources.read_error}")
    if sources.active_error and verdict.decision is not Decision.STOP:
        return Verdict(
            Decision.WAIT, Reason.SOURCE_UNREADABLE,
            f"cannot read the metrics now ({sources.active_error}); judged up to step {verdict.last_step}, "
            "waiting for the source to come back",
            verdict.anomalies, verdict.last_step, verdict.summary,
        )
    if sources.untrusted and verdict.decision is Decision.STOP:
        return Verdict(Decision.WAIT, Reason.SOURCE_WRITABLE_BY_OTHERS,
                       f"would STOP ({verdict.reason.value}: {verdict.message}), but not on files others can write: "
                       f"{sources.untrusted}; {FIX}" + (f"; damaged: {sources.damaged}" if sources.damaged else ""),
                       verdict.anomalies, verdict.last_step, verdict.summary)
    if sources.untrusted and verdict.decision is Decision.CONTINUE and verdict.anomalies:
        # healthy only after an anomaly: what follows it may be his appended records masking her broken run
        seen = verdict.anomalies[0]
        return Verdict(Decision.WAIT, Reason.SOURCE_WRITABLE_BY_OTHERS,
                       f"healthy only after {seen.kind} in {seen.metric} at step {seen.step}, and the records after it "
                       f"are in files others can write: {sources.untrusted}; {FIX}",
                       verdict.anomalies, verdict.last_step, verdict.summary)
    if sources.damaged and verdict.decision is Decision.CONTINUE:
        return Verdict(Decision.WAIT, Reason.SOURCE_DAMAGED, f"damaged metric files ({sources.damaged}); the bytes "
                       "around the damage look healthy", verdict.anomalies, verdict.last_step, verdict.summary)
    capped = history.cap_message()
    if capped and verdict.decision is Decision.CONTINUE:  # healthy in what was judged, but not all was judged
        return Verdict(Decision.WAIT, Reason.SERIES_CAPPED, f"{capped}; the series judged look healthy",
                       verdict.anomalies, verdict.last_step, verdict.summary)
    return verdict
