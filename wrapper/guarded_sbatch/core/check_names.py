"""The names of the pre-flight checks (config and argv validate waivers against them)."""

from __future__ import annotations

import enum


class CheckName(str, enum.Enum):
    CONFIG_DIFF = "config-diff"
    RUN_NAME = "run-name"
    PATHS = "paths"
    INTERPRETER = "interpreter"  # the job's python can import what the training script imports
    ARGUMENTS = "arguments"  # the launcher line passes every option the program requires
    MONITORING = "monitoring"
    ETA = "eta"
    OWN_FOLDER = "own-folder"  # no live guarded run writes this run's folders


CHECK_NAMES: tuple[str, ...] = tuple(name.value for name in CheckName)
