"""One interface over Slurm and local processes, and the one registry of its backends."""

from __future__ import annotations

import importlib

from guarded_sbatch.core.errors import UsageError
from guarded_sbatch.core.suggest import did_you_mean
from guarded_sbatch.scheduler.interface import BackendTraits, JobInfo, JobState, Scheduler, SubmitRequest

__all__ = ["BACKENDS", "BackendTraits", "JobInfo", "JobState", "Scheduler", "SubmitRequest", "backend_class",
           "backend_names", "backend_traits", "check_backend", "get_scheduler", "resolve_backend"]

# The registry: each backend's name and its module, which names its class `BACKEND` (imported only when that backend
# is asked for, so a local launch never loads Slurm's modules). A new backend is one module plus one line here; every
# list of backend names (argparse's choices, the config's `scheduler`, --guard-backend) reads this one.
BACKENDS: dict[str, str] = {
    "slurm": "guarded_sbatch.scheduler.slurm",
    "local": "guarded_sbatch.scheduler.local",
}


def backend_names() -> tuple[str, ...]:
    """Every registered backend, without importing one."""
    return tuple(BACKENDS)


def backend_class(name: str) -> type[Scheduler]:
    """The class of the backend called `name` (its module alone imported), as the Scheduler it makes."""
    module = BACKENDS.get(name)
    if module is None:
        raise UsageError(f"unknown scheduler backend {name!r}; {did_you_mean(name, list(BACKENDS))}"
                         f"use {' or '.join(BACKENDS)}")
    found: type[Scheduler] = importlib.import_module(module).BACKEND
    return found


def backend_traits(name: str) -> BackendTraits:
    """The traits of the backend called `name`, read from its class without making one (making a backend may touch
    the state folder): `backend_traits("slurm").multi_node`."""
    traits = backend_class(name).traits
    if not isinstance(traits, BackendTraits):
        raise TypeError(f"{BACKENDS[name]}.BACKEND.traits is not a BackendTraits (scheduler/interface.py)")
    return traits


def check_backend(name: str, where: str) -> str:
    """`name` if it is a registered backend, else UsageError naming `where` it came from (nothing imported)."""
    if name not in BACKENDS:
        raise UsageError(f"unknown backend {name!r} ({where}); {did_you_mean(name, list(BACKENDS))}"
                         f"use {' or '.join(BACKENDS)}")
    return name


def resolve_backend(configured: str) -> str:
    """The config's `scheduler` made concrete: "auto" is slurm when sbatch is on PATH and answers, else local."""
    if configured != "auto":
        return check_backend(configured, "the config's `scheduler`")
    from guarded_sbatch.scheduler.slurm import sbatch_answers  # noqa: PLC0415 - Slurm's module only for "auto"

    return "slurm" if sbatch_answers() else "local"


def get_scheduler(name: str, **kwargs: object) -> Scheduler:
    """A backend of the registry by its name ("slurm", "local", ...)."""
    return backend_class(name)(**kwargs)
