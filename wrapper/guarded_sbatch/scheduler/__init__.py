"""One interface over Slurm and local processes."""

from guarded_sbatch.core.errors import UsageError
from guarded_sbatch.scheduler.interface import JobInfo, JobState, Scheduler, SubmitRequest

__all__ = ["JobInfo", "JobState", "Scheduler", "SubmitRequest", "get_scheduler", "resolve_backend"]


def resolve_backend(configured: str) -> str:
    """The config's `scheduler` made concrete: "auto" is slurm when sbatch is on PATH and answers, else local."""
    if configured != "auto":
        return configured
    from guarded_sbatch.scheduler.slurm import sbatch_answers  # noqa: PLC0415 - Slurm's module only for "auto"

    return "slurm" if sbatch_answers() else "local"


def get_scheduler(name: str, **kwargs: object) -> Scheduler:
    """Return the backend called `name` ("slurm", "local", or "process" for an adopted process)."""
    # lazy: each backend is imported only when asked for (the local one never loads Slurm's parsing)
    if name == "slurm":
        from guarded_sbatch.scheduler.slurm import SlurmScheduler  # noqa: PLC0415 - only the backend asked for

        return SlurmScheduler(**kwargs)  # type: ignore[arg-type]
    if name == "local":
        from guarded_sbatch.scheduler.local import LocalScheduler  # noqa: PLC0415 - only the backend asked for

        return LocalScheduler(**kwargs)  # type: ignore[arg-type]
    if name == "process":
        from guarded_sbatch.scheduler.process import ProcessScheduler  # noqa: PLC0415 - only the backend asked for

        return ProcessScheduler()
    raise UsageError(f"unknown scheduler backend {name!r}: use 'slurm', 'local' or 'process'")
