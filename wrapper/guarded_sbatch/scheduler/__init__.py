"""One interface over Slurm and local processes, and the one registry of its backends."""

from __future__ import annotations

import importlib
from typing import Any

from guarded_sbatch.core.errors import UsageError
from guarded_sbatch.core.suggest import did_you_mean
from guarded_sbatch.scheduler.interface import JobInfo, JobState, Scheduler, SchedulerDefaults, SubmitRequest

__all__ = ["BACKENDS", "JobInfo", "JobState", "Scheduler", "SubmitRequest", "backend_class", "backend_names",
           "backend_traits", "check_backend", "get_scheduler", "launch_backends", "resolve_backend"]

# The registry: each backend's name and its module, which names its class `BACKEND` (imported only when asked for,
# so the local backend never loads Slurm's parsing). A new backend is one module plus one line here; every list of
# backend names (argparse's choices, the config's `scheduler`, --guard-backend) reads this one.
BACKENDS: dict[str, str] = {
    "slurm": "guarded_sbatch.scheduler.slurm",
    "local": "guarded_sbatch.scheduler.local",
    "process": "guarded_sbatch.scheduler.process",
}


def backend_names() -> tuple[str, ...]:
    """Every registered backend (a watcher's --backend: an adopted process's included)."""
    return tuple(BACKENDS)


def backend_class(name: str) -> type[Scheduler]:
    """The class of the backend called `name`, as the Scheduler it makes."""
    found: type[Scheduler] = _declared(name)
    return found


def backend_traits(name: str) -> type[SchedulerDefaults]:
    """The class of the backend called `name` as its traits, class attributes read without making one (making a
    backend may touch the state folder): `backend_traits("slurm").multi_node`."""
    found = _declared(name)
    if not (isinstance(found, type) and issubclass(found, SchedulerDefaults)):
        raise TypeError(f"{BACKENDS[name]}.BACKEND does not inherit SchedulerDefaults (scheduler/interface.py)")
    return found


def _declared(name: str) -> Any:
    module = BACKENDS.get(name)
    if module is None:
        raise UsageError(f"unknown scheduler backend {name!r}; {did_you_mean(name, list(BACKENDS))}"
                         f"use {' or '.join(BACKENDS)}")
    return importlib.import_module(module).BACKEND


def launch_backends() -> tuple[str, ...]:
    """The backends a launch can submit to (every one that accepts submissions)."""
    return tuple(name for name in BACKENDS if backend_traits(name).accepts_submissions)


def check_backend(name: str, where: str) -> str:
    """`name` if a launch can submit to it, else UsageError naming `where` it came from."""
    choices = launch_backends()
    if name not in choices:
        raise UsageError(f"unknown backend {name!r} ({where}); {did_you_mean(name, list(choices))}"
                         f"use {' or '.join(choices)}")
    return name


def resolve_backend(configured: str) -> str:
    """The config's `scheduler` made concrete: "auto" is slurm when sbatch is on PATH and answers, else local."""
    if configured != "auto":
        return check_backend(configured, "the config's `scheduler`")
    from guarded_sbatch.scheduler.slurm import sbatch_answers  # noqa: PLC0415 - Slurm's module only for "auto"

    return "slurm" if sbatch_answers() else "local"


def get_scheduler(name: str, **kwargs: object) -> Scheduler:
    """A backend of the registry by its name ("slurm", "local", "process" for an adopted process, ...)."""
    return backend_class(name)(**kwargs)
