"""When a crash the job printed (traceback, CUDA OOM, NCCL timeout...) counts as the end of the run.

A printed traceback is not always the end: a caught exception's traceback (a retried upload, a data loader
that recovered) sits in the log of a healthy run. While a job is live, a crash event (judge/history.CrashEvent)
is therefore PRINTED in the judged history (the judge says WAIT) until the run has logged nothing after it
for CRASH_CONFIRM_S or three of its own logging intervals, whichever is longer (a large run may log every few
minutes), then CONFIRMED (the judge says STOP); a run that logs again is alive and the crash is DISMISSED.
Points whose wall time is more than ALIVE_MARGIN_S after the crash prove life (the margin covers
clock skew between the trainer's node and the watcher's); a source without wall times (Lightning's CSV) proves
it by new points at two later polls (a dead trainer's last flush is one batch). A one-shot read, or a job the
scheduler says has ended, confirms at once: nothing more will come. A text log that is itself the judged
source clears its own crash when a training line follows; the same delay applies to it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import numpy as np

from guarded_sbatch.sources.points import CrashEvent, CrashState
from guarded_sbatch.sources.files import check_regular

if TYPE_CHECKING:
    from guarded_sbatch.judge.history import MetricHistory
    from guarded_sbatch.sources.base import MetricSource

# torch's SummaryWriter flushes every 120 s: a live run shows its next points well within this
CRASH_CONFIRM_S = 240.0
ALIVE_MARGIN_S = 60.0

LogHistories = Iterable[tuple["MetricSource", "MetricHistory"]]


class CrashConfirmation:
    def __init__(self, *, live: bool, clock: Callable[[], float]) -> None:
        self.live = live
        self.job_over = False  # set by the watcher when the scheduler says the job ended
        self._clock = clock
        self._printed: dict[str, float] = {}  # crash key -> when it was printed, at the latest
        self._arrivals: dict[str, int] = {}  # crash key -> later polls that brought the judged source new points
        self._dismissed: set[str] = set()
        self._arrived_at: list[float] = []  # the last polls that brought the judged source new points

    def note_poll(self, logs: LogHistories, new_points: int) -> None:
        """After each read of the sources: remember when each crash was first seen, and count the polls since
        then that brought the judged source new points."""
        now = self._clock()
        if new_points:
            self._arrived_at = [*self._arrived_at[-8:], now]
        for source, history in logs:
            for event in _open_crashes(history):
                printed = self._printed.get(event.key)
                if printed is None:
                    self._printed[event.key] = _printed_at(source, now)
                elif new_points and now > printed + ALIVE_MARGIN_S:
                    self._arrivals[event.key] = self._arrivals.get(event.key, 0) + 1

    def settle(self, logs: LogHistories, judged: MetricHistory) -> None:
        """Put each crash of the job's logs into the judged history in its state (PRINTED, CONFIRMED or
        DISMISSED): in place when the log is the judged source, else forwarded beside the judged source's points."""
        for source, history in logs:
            for event in history.crashes():
                if event.state is CrashState.DISMISSED:  # the log itself saw training go on after it
                    if history is not judged and event.key in {e.key for e in judged.crashes()}:
                        judged.put_crash(event)
                    continue
                judged.put_crash(dataclasses.replace(event, state=self._state(event.key, source, judged)))

    def _state(self, key: str, source: MetricSource, judged: MetricHistory) -> CrashState:
        now = self._clock()
        printed = self._printed.get(key)
        if printed is None:
            printed = self._printed[key] = _printed_at(source, now)
        last_logged = judged.last_wall_time
        if key in self._dismissed or (last_logged is not None and last_logged > printed + ALIVE_MARGIN_S) \
                or self._arrivals.get(key, 0) >= 2:
            self._dismissed.add(key)
            return CrashState.DISMISSED
        if self.live and not self.job_over and now - printed < max(CRASH_CONFIRM_S, 3 * self._cadence(judged)):
            return CrashState.PRINTED
        return CrashState.CONFIRMED

    def _cadence(self, judged: MetricHistory) -> float:
        """The run's own rhythm (seconds between new points; 0 when unknown): from the polls that brought new
        points (flushes included) and from the wall times of the judged source's most logged key."""
        gaps: list[float] = []
        if len(self._arrived_at) >= 3:
            gaps.append(float(np.median(np.diff(self._arrived_at))))
        keys = judged.keys()
        if keys:
            walls = judged.wall_times(max(keys, key=lambda k: len(judged.series(k)[0])))[-65:]
            steps = np.diff(np.unique(walls[walls > 0]))
            if len(steps) >= 2:
                gaps.append(float(np.median(steps)))
        return max(gaps, default=0.0)


def _open_crashes(history: MetricHistory) -> list[CrashEvent]:
    """The crashes that training did not go on after, as the log's reader saw them."""
    return [event for event in history.crashes() if event.state is not CrashState.DISMISSED]


def _printed_at(source: MetricSource, now: float) -> float:
    """The log's last write, when it is a file (it was written after the crash), else now."""
    path = source.path
    if path is not None:
        try:
            return min(now, check_regular(path).st_mtime)
        except OSError:
            pass
    return now
