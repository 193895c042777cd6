"""What one sidecar loop is told: the run, its sources, its cadence, where it writes."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from guarded_sbatch.core.config import Config, SidecarJobSettings
from guarded_sbatch.judge.policy import JudgePolicy


@dataclass
class SidecarSettings:
    run_name: str
    job_id: str | None
    state_file: Path
    evidence_dir: Path
    notes_path: Path | None = None
    stop_command: str | None = None
    tb_paths: list[Path] = field(default_factory=list)
    wandb_paths: list[Path] = field(default_factory=list)
    log_paths: list[Path] = field(default_factory=list)
    search_dirs: list[Path] = field(default_factory=list)
    wandb_run: str | None = None  # a W&B run path or URL, read through the online API
    fast_interval_s: float = SidecarJobSettings.fast_interval_s
    full_interval_s: float = Config.check_interval_s
    job_poll_s: float = SidecarJobSettings.job_poll_s
    min_quiet_poll_s: float = 45.0
    policy: JudgePolicy | None = None
