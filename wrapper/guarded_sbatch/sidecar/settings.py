"""What one sidecar loop is told: the run, its sources, its cadence, where it writes."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from guarded_sbatch.actions.notify import NotifySettings
from guarded_sbatch.records.audit import AuditLog
from guarded_sbatch.core.config import Config, SidecarJobSettings
from guarded_sbatch.sources.run_sources import RunSources, SourceSpec
from guarded_sbatch.judge.policy import JudgePolicy

if TYPE_CHECKING:
    from guarded_sbatch.records.registry import RunRecord


@dataclass(frozen=True)
class SidecarSettings:
    run_name: str
    job_id: str | None
    state_file: Path
    evidence_dir: Path
    notes_path: Path | None = None
    stop_command: str | None = None
    sources: list[SourceSpec] = field(default_factory=list)  # named outright (flags): read whatever else is found
    search_dirs: list[Path] = field(default_factory=list)
    fast_interval_s: float = SidecarJobSettings.fast_interval_s
    full_interval_s: float = Config.check_interval_s
    job_poll_s: float = SidecarJobSettings.job_poll_s
    policy: JudgePolicy | None = None
    identity: RunSources | None = None  # a guarded run's own sources, from its record: read only these
    log_commands: list[str] = field(default_factory=list)  # commands whose stdout is the recent log
    log_command_timeout_s: float = 30.0
    stop_target: str | None = None  # tmux:SESSION | pid:PID | ssh:HOST[:PORT]:PID (actions/stop_targets.py)
    stop_grace_s: float = 30.0
    notify: NotifySettings | None = None  # alerts on stop / wait_long / crash (actions/notify.py)
    audit: AuditLog | None = None  # the site's audit trail: a STOP is recorded there
    startup_grace_s: float = 300.0  # no metrics yet this soon after the start is normal, not "unreachable"
    startup_poll_s: float = 10.0  # how often to look for the first metrics during the grace
    # a running job with no judged loss this long is UNGUARDED (sidecar/unguarded_time.py); a guarded run's, from its record
    unguarded_after_s: float = SidecarJobSettings.unguarded_after_s


def recorded_unguarded_after(record: RunRecord | None) -> float:
    """The UNGUARDED time a guarded run was launched with (its record's), else the built-in one."""
    value = record.unguarded_after_s if record is not None else None
    return float(value) if isinstance(value, (int, float)) and value > 0 else SidecarJobSettings.unguarded_after_s
