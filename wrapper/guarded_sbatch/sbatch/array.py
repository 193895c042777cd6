"""sbatch's `--array` value (`0-3`, `1,3,5`, `0-15:4`, `0-99%4`): the task ids of a job array, in order, and how
many may run at once. Read by the launch (one run record per task) and by the local backend (which runs them)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from guarded_sbatch.core.errors import UsageError

MAX_ARRAY_INDEX = 4_000_000  # Slurm's own ceiling on a task id
MAX_ARRAY_TASKS = 10_000  # one run record (and, locally, one folder) per task
_RANGE = re.compile(r"(\d+)(?:-(\d+)(?::(\d+))?)?")


@dataclass(frozen=True)
class ArraySpec:
    """A job array's task ids, in order, and how many may run at once (None: no limit)."""

    tasks: tuple[int, ...]
    throttle: int | None
    step: int  # SLURM_ARRAY_TASK_STEP: a single range's step, else 1 (as Slurm sets it)

    @property
    def count(self) -> int:
        return len(self.tasks)

    def task_ids(self, job_id: str) -> list[str]:
        """How each task is named to the scheduler, on every backend: `<job>_<task>`."""
        return [f"{job_id}_{task}" for task in self.tasks]


def parse_array_spec(text: str) -> ArraySpec:
    """sbatch's `--array` value: comma-separated ids and ranges (`A-B`, `A-B:STEP`), then `%N`."""
    where = f"--array={text}"
    body, _, limit = text.strip().partition("%")
    throttle = None
    if limit:
        if not limit.isdigit() or int(limit) < 1:
            raise UsageError(f"{where}: the limit after % must be a whole number of at least 1")
        throttle = int(limit)
    tasks: set[int] = set()
    steps = []
    for part in body.split(","):
        match = _RANGE.fullmatch(part.strip())
        if not match:
            raise UsageError(f"{where}: {part!r} is not a task id, A-B or A-B:STEP (e.g. 0-7%2, 1,3,5, 0-15:4)")
        first, last, step = int(match.group(1)), int(match.group(2) or match.group(1)), int(match.group(3) or 1)
        if last < first or step < 1 or last > MAX_ARRAY_INDEX:
            raise UsageError(f"{where}: {part!r} is not a range of task ids from 0 to {MAX_ARRAY_INDEX}")
        if (last - first) // step + 1 + len(tasks) > MAX_ARRAY_TASKS:
            raise UsageError(f"{where}: more than {MAX_ARRAY_TASKS} tasks")
        tasks.update(range(first, last + 1, step))
        steps.append(step)
    return ArraySpec(tasks=tuple(sorted(tasks)), throttle=throttle, step=steps[0] if len(steps) == 1 else 1)
