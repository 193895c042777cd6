"""One interface over Slurm and local processes."""

from guarded_sbatch.scheduler.base import JobInfo, JobState, Scheduler, SubmitRequest

__all__ = ["JobInfo", "JobState", "Scheduler", "SubmitRequest", "get_scheduler"]


def get_scheduler(name: str, **kwargs: object) -> Scheduler:
    """Return the backend called `name` ("slurm" or "local")."""
    if name == "slurm":
        from guarded_sbatch.scheduler.slurm import SlurmScheduler

        return SlurmScheduler(**kwargs)  # type: ignore[arg-type]
    if name == "local":
        from guarded_sbatch.scheduler.local import LocalScheduler

        return LocalScheduler(**kwargs)  # type: ignore[arg-type]
    from guarded_sbatch.core.errors import UsageError

    raise UsageError(f"unknown scheduler backend {name!r}: use 'slurm' or 'local'")
