"""Everything the checks look at, gathered once: the script, the effective options, the run's config."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from guarded_sbatch.core.config import Config
from guarded_sbatch.core.errors import UsageError
from guarded_sbatch.sbatch.argv import LaunchArgs
from guarded_sbatch.core.mounts import Mount
from guarded_sbatch.sbatch.launcher import LauncherLine
from guarded_sbatch.launch.reference_search import Reference
from guarded_sbatch.launch.runconfig import RunConfig, config_from_overrides, load_run_config, not_a_file
from guarded_sbatch.sbatch.options import EffectiveOptions
from guarded_sbatch.sbatch.script import ParsedScript
from guarded_sbatch.scheduler.interface import Scheduler


@dataclass
class PreflightContext:
    launch: LaunchArgs
    script: ParsedScript
    options: EffectiveOptions
    config: Config
    scheduler: Scheduler | None
    workdir: Path  # where the job runs: --chdir, else the submission folder
    env: Mapping[str, str]  # the submitting environment plus the script's own plain assignments
    now: datetime  # aware, local time zone
    restart: bool
    intended: RunConfig | None = None
    intended_problem: str | None = None  # why the run's config could not be found or read
    intended_unreadable: bool = False  # the config file was found, and the problem (which names its fix) is inside it
    reference: Reference | None = None
    reference_problem: str | None = None
    mounts: list[Mount] | None = None  # None: read the live mount table
    submit_dir: Path | None = None  # where sbatch is run (the folder relative paths on its line are from)
    # launch/source_plan.SourcePlan: what the run writes and reads as its own (that module imports this one)
    source_plan: object | None = None
    swept_lr: tuple[float, ...] = ()  # check-sweep: the learning rates the sweep tries (lr is searched, not set)

    @property
    def launcher(self) -> LauncherLine | None:
        return self.script.launcher

    def resolve(self, text: str) -> Path:
        """A path as the job would see it (relative to its working folder); `~` expanded."""
        path = Path(os.path.expanduser(text))
        return path if path.is_absolute() else self.workdir / path

    def program_path(self) -> Path | None:
        launcher = self.launcher
        if launcher is None or launcher.is_module:
            return None
        return self.resolve(launcher.program)


def load_intended_config(context: PreflightContext) -> None:
    """Find and load the intended run's config; on trouble leave a one-line reason in intended_problem."""
    launcher = context.launcher
    overrides = dict(launcher.overrides) if launcher else {}
    candidate: Path | None = None
    if context.launch.guard_options.config is not None:
        candidate = context.resolve(str(context.launch.guard_options.config))
    elif launcher is not None and launcher.config_path is not None:
        if launcher.config_unresolved:
            shell = context.script.shell
            why = "; ".join(shell.why_unresolved(launcher.config_path)) if shell else ""
            context.intended_problem = (
                f"the config argument {launcher.config_path!r} needs a shell to expand"
                f"{f' ({why})' if why else ''}; name the file with --guard-config"
            )
            return
        candidate = context.resolve(launcher.config_path)
    elif launcher is not None and launcher.hydra_config_name is not None:
        program = context.program_path()
        base = Path(launcher.hydra_config_dir) if launcher.hydra_config_dir else Path("conf")
        if not base.is_absolute():
            roots = [program.parent] if program else []
            roots.append(context.workdir)
            base = next((root / base for root in roots if (root / base).is_dir()), context.workdir / base)
        name = launcher.hydra_config_name
        candidate = base / (name if name.endswith((".yaml", ".yml")) else f"{name}.yaml")
    if candidate is None:
        if overrides:
            context.intended = config_from_overrides(overrides)
        context.intended_problem = "no config file on the launcher line (--config FILE, --config-name, a .yaml argument)"
        return
    if candidate.is_dir():
        context.intended_problem = f"the run's config {candidate} is a folder, not a config file"
        return
    if not candidate.is_file():
        context.intended_problem = f"the run's config {candidate} {not_a_file(candidate)}"
        if overrides:
            context.intended = config_from_overrides(overrides)
        return
    try:
        context.intended = load_run_config(candidate, overrides)
    except UsageError as exc:
        context.intended_problem = str(exc)
        context.intended_unreadable = True

