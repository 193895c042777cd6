"""The end of a Slurm job noticed without asking slurmctld: a job step that Slurm kills when the job ends."""

from __future__ import annotations

import os
import time

from guarded_sbatch.core.errors import CommandError
from guarded_sbatch.core.runner import StartedProcess, start_process

# the step's name in `sacct` (CANCELLED 0:15 under every job it watched: docs/user-guide.md explains it)
STEP_NAME = "guarded-sbatch-watch"


class JobEndWatch:
    """`srun --jobid=J --overlap sleep` kept running in the background: Slurm kills the step when
    job J ends. A long-lived process, so it is the one Slurm call made through start_process, not run_command."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        self.started_at = time.monotonic()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SRUN_"))}
        if "SLURM_CONF" in os.environ:
            env["SLURM_CONF"] = os.environ["SLURM_CONF"]
        argv = ["srun", f"--jobid={job_id}", "--overlap", "--nodes=1", "--ntasks=1", "--cpus-per-task=1",
                "--mem-per-cpu=1M", f"--job-name={STEP_NAME}", "--quiet", "sleep", "infinity"]
        try:
            self.process: StartedProcess | None = start_process(argv, env=env)
        except CommandError:
            self.process = None

    def ended(self) -> bool:
        """True once the step is gone: the job ended (or the step could not start; ask the scheduler)."""
        return self.process is None or self.process.poll() is not None

    def close(self) -> None:
        if self.process is not None:
            self.process.stop(grace_s=5)
