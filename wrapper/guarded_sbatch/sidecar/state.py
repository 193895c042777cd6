"""What a sidecar keeps between polls, in a file, so a requeued or restarted sidecar resumes."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from guarded_sbatch.core.config import SidecarJobSettings
from guarded_sbatch.core.fsutil import locked, read_json, write_json_atomic
from guarded_sbatch.core.redact import redact_tree


@dataclass
class SidecarState:
    started_at: float = 0.0
    restarts: int = 0
    checks: int = 0
    full_reports: int = 0
    next_full_report_at: float = 0.0
    full_interval_s: float = SidecarJobSettings.full_interval_s  # grows while healthy; set at the first start
    healthy_streak: int = 0
    last_decision: str = ""
    last_reason: str = ""
    last_message: str = ""
    last_step: int | None = None
    last_new_data_at: float = 0.0
    last_job_poll_at: float = 0.0
    job_polls: list[float] = field(default_factory=list)  # times of scheduler calls, last hour
    quiet_threshold_s: float = 45.0
    last_job_state: str = ""
    job_note: str = ""  # the scheduler's word on the job no verdict carries (a run lost with a node), until it runs again
    data_source: str = "unreachable"
    reported_anomalies: list[str] = field(default_factory=list)
    finished: bool = False
    final_summary: str = ""
    evidence: str = ""
    stop_requested_at: float = 0.0  # set (and saved) just before the stop: never two stops of one run
    stop_by: str = ""  # another watcher of the run that stopped it (a foreground `monitor --job`); "": this one
    stop_detail: str = ""  # what that watcher's stop did, once done
    step_rate: float | None = None  # steps per second, for the live ETA
    first_step_seen: int | None = None
    first_step_seen_at: float = 0.0
    peak_rss_mb: float = 0.0  # of the last sidecar process, read at its exit
    cpu_seconds: float = 0.0  # all sidecar processes of this run together
    scheduler_calls: int = 0  # state/info/cancel/watch calls, all sidecar processes together
    wait_since: float = 0.0  # when the current run of WAIT decisions began (for the wait_long alert)
    alerts_sent: list[str] = field(default_factory=list)  # events already alerted (each once per run)
    startup_note_shown: bool = False
    running_since: float = 0.0  # the first poll that saw the job running (or new points): UNGUARDED counts from it
    poll_errors: int = 0  # polls where a source, the judge or the report failed (each became a WAIT)
    last_poll_error: str = ""

    @classmethod
    def load(cls, path: Path) -> "SidecarState":
        raw = read_json(path)
        return cls.load_dict(raw) if isinstance(raw, dict) else cls()

    def save(self, path: Path, *, take_shared: bool = True) -> None:
        """Atomic replace under the state file's lock (a requeued sidecar and `status` may overlap). A STOP another
        watcher of the run saved there meanwhile (`share_stop`) is the run's: taken in, never written over (unless
        `take_shared` is False: that watcher's stop did not take, and this one guards the run again)."""
        with locked(path):
            if take_shared:
                self._take_shared_stop(read_json(path))
            write_json_atomic(path, redact_tree(asdict(self)))  # crash text and errors may quote secrets

    def take_shared_stop(self, path: Path) -> None:
        """Read now the STOP another watcher of the run saved in `path` (before acting on the job's end or a STOP)."""
        self._take_shared_stop(read_json(path))

    def _take_shared_stop(self, saved: object) -> None:
        if not isinstance(saved, dict) or not saved.get("stop_by"):
            return
        other = SidecarState.load_dict(saved)
        if not self.stop_requested_at:
            _copy_decision(self, other)
            self.stop_by = other.stop_by
        if self.stop_by == other.stop_by:
            self.stop_detail = self.stop_detail or other.stop_detail
            self.evidence = self.evidence or other.evidence
            self.final_summary = self.final_summary or other.final_summary

    @classmethod
    def load_dict(cls, raw: dict[str, object]) -> "SidecarState":
        defaults = cls()
        known = {f.name: type(getattr(defaults, f.name)) for f in fields(cls)}
        kept = {}
        for key, value in raw.items():
            expected = known.get(key)
            if expected is None:
                continue
            numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
            if value is None or isinstance(value, expected) or (expected in (float, type(None)) and numeric):
                kept[key] = value  # a tampered or odd-typed field falls back to its default
        try:
            return cls(**kept)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return cls()

    def record_job_poll(self, now: float) -> None:
        self.last_job_poll_at = now
        self.job_polls = [t for t in self.job_polls if now - t < 3600] + [now]


def share_stop(path: Path, state: SidecarState, by: str) -> None:
    """A watcher that is not the run's own sidecar (a foreground `monitor --job`) saves its STOP into the run's state
    (before the cancel, then what it did): `status` names the guard, and the run's sidecar takes it in (`save`) and
    tells it in its FINAL_SUMMARY instead of finding a cancelled job with nothing to stop."""
    with locked(path):
        raw = read_json(path)
        run = SidecarState.load_dict(raw) if isinstance(raw, dict) else SidecarState()
        if run.stop_requested_at and run.stop_by != by:
            return  # stopped already by another watcher: its record stands
        _copy_decision(run, state)
        run.stop_by, run.stop_detail = by, state.stop_detail
        run.evidence = run.evidence or state.evidence
        run.final_summary = run.final_summary or state.final_summary
        write_json_atomic(path, redact_tree(asdict(run)))


def _copy_decision(to: SidecarState, source: SidecarState) -> None:
    to.last_decision, to.last_reason = source.last_decision, source.last_reason
    to.last_message, to.last_step = source.last_message, source.last_step
    to.stop_requested_at = source.stop_requested_at
