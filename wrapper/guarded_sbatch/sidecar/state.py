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
    data_source: str = "unreachable"
    reported_anomalies: list[str] = field(default_factory=list)
    finished: bool = False
    final_summary: str = ""
    evidence: str = ""
    stop_requested_at: float = 0.0  # set (and saved) just before the stop: never two stops of one run
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
        if not isinstance(raw, dict):
            return cls()
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
            return cls(**kept)
        except (TypeError, ValueError):
            return cls()

    def save(self, path: Path) -> None:
        """Atomic replace under the state file's lock (a requeued sidecar and `status` may overlap)."""
        with locked(path):
            write_json_atomic(path, redact_tree(asdict(self)))  # crash text and errors may quote secrets

    def record_job_poll(self, now: float) -> None:
        self.last_job_poll_at = now
        self.job_polls = [t for t in self.job_polls if now - t < 3600] + [now]
