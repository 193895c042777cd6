"""A one-shot judgment (`monitor --once`, `show`) reads the whole run, not the first poll's worth, and judges it.

Each reader takes at most GUARDED_SBATCH_MAX_READ_MB per file per read (so a live poll stays short); a run read
once, after the fact, is read again and again until nothing new comes, so a run that ended in NaN after its
first 16 MB is not called healthy. The history keeps its own memory bounds (series cap, thinning) meanwhile.
Past MAX_ROUNDS reads the rest is left unread and the verdict says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from guarded_sbatch.core.file_trust import damage_note, untrusted_note
from guarded_sbatch.judge.policy import JudgePolicy, RunContext
from guarded_sbatch.judge.source_state import SourceReadState, judge
from guarded_sbatch.judge.verdict import Decision, Reason, Verdict
from guarded_sbatch.sidecar.plan import WatchPlan
from guarded_sbatch.sidecar.source_set import SourceSet
from guarded_sbatch.sources.kinds import label as source_label

MAX_ROUNDS = 256  # x 16 MB per file and read: 4 GB of one file
QUIET_ROUNDS = 2  # reads with nothing new in a row that mean "caught up" (one may be a chunk with no points)


def read_whole_run(sources: SourceSet, max_rounds: int = MAX_ROUNDS) -> str:
    """Read `sources` until caught up; "" when it was, else a note saying what was left unread."""
    quiet = 0
    for _ in range(max_rounds):
        if sources.read():
            quiet = 0
        else:
            quiet += 1
            if quiet >= QUIET_ROUNDS:
                return ""
    return f"judged the first {max_rounds} reads of each file only; the rest of the run was not read"


def with_note(verdict: Verdict, note: str) -> Verdict:
    if not note:
        return verdict
    return Verdict(verdict.decision, verdict.reason, f"{verdict.message} ({note})", verdict.anomalies,
                   verdict.last_step, verdict.summary)


def judge_sources(sources: SourceSet, policy: JudgePolicy | None, context: RunContext) -> Verdict:
    files = sources.judged_files()
    return judge(sources.history(), policy, context, SourceReadState(
        sources.read_error, sources.active_error or "", untrusted_note(files), damage_note(files)))


@dataclass(frozen=True)
class OneShot:
    verdict: Verdict
    data_source: str  # the judged kind's report label
    files: tuple[str, ...]  # the files the judged source read


def judge_once(settings: WatchPlan, only_files: frozenset[str] | None = None) -> OneShot:
    """The one-shot check, naming the files it judged; `only_files`: the TensorBoard files of one run of a folder
    that holds several (sidecar/one_shot_runs.py), the others never read."""
    sources = SourceSet(settings, None, live=False, only_files=only_files)
    try:
        unread = read_whole_run(sources)
        verdict = with_note(judge_sources(sources, settings.policy, RunContext(job_live=False)), unread)
    except Exception as exc:  # noqa: BLE001 - one odd input gives WAIT with the error, never exit 70
        text = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        verdict = Verdict(Decision.WAIT, Reason.SOURCE_UNREADABLE, f"the metrics could not be judged ({text})")
    return OneShot(verdict, source_label(sources.active_kind), tuple(sources.judged_files()))
