"""kill and restart of a job array's tasks (cli/kill_restart.py drives them): each task is a run of its own.

- `kill J_T` / `restart J_T`: that task alone is cancelled (`scancel J_T`) and cleaned up; a folder the task shares
  with its siblings (one `checkpoint_dir` for the whole array) is left to them. `restart J_T` relaunches the same
  script as a one-task array, `--array=T`, so the task picks the same settings from SLURM_ARRAY_TASK_ID.
- `kill J` / `restart J`: the whole array is cancelled in one call (`scancel J`: pending tasks too), each task cleaned
  up; `restart J` relaunches the array once, and each new task names the old task of its index as restarted_from.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from guarded_sbatch.core.errors import SchedulerError
from guarded_sbatch.core.waiting import Waiting
from guarded_sbatch.records.registry import RunRecord, list_runs
from guarded_sbatch.scheduler.interface import JobState, Scheduler


def array_tasks(key: str) -> list[RunRecord]:
    """The run records of the tasks of job array `key` (`J`: their job ids are `J_T`), task order; [] when `key`
    is no array's id (or a run of its own has that job id)."""
    if not key.isdigit():
        return []
    runs = list_runs()
    if any(record.job_id == key for record in runs):
        return []
    tasks = [r for r in runs if r.job_id.partition("_")[0] == key and r.job_id.partition("_")[2].isdigit()]
    return sorted(tasks, key=lambda r: int(r.job_id.partition("_")[2]))


def task_of(record: RunRecord) -> str | None:
    """The task index of an array task's run (`J_T` -> `T`); None for a run that is no array task."""
    job, sep, task = record.job_id.partition("_")
    return task if sep and job.isdigit() and task.isdigit() else None


def siblings(record: RunRecord) -> list[RunRecord]:
    """The other tasks of the same array launch."""
    array = record.job_id.partition("_")[0]
    return [r for r in list_runs() if r.run_id != record.run_id and task_of(r) is not None
            and r.job_id.partition("_")[0] == array]


def _same(path: str, others: list[str]) -> bool:
    if not path:
        return False
    mine = Path(path).resolve()
    return any(other and (Path(other).resolve() == mine or mine in Path(other).resolve().parents
                          or Path(other).resolve() in mine.parents) for other in others)


def without_shared(record: RunRecord, others: list[RunRecord], source_files: list[str],
                   their_files: list[str]) -> tuple[RunRecord, list[str], list[str]]:
    """What a task's cleanup may delete: its record with the folders a sibling also names blanked, its own source
    files less those a sibling also has (or that lie above or below a sibling's); and what was left to the siblings."""
    kept: list[str] = []
    planning = record
    if _same(record.checkpoint_dir, [o.checkpoint_dir for o in others]):
        kept.append(record.checkpoint_dir)
        planning = dataclasses.replace(planning, checkpoint_dir="")
    if _same(record.artifact_dir, [o.artifact_dir for o in others]):
        kept.append(record.artifact_dir)
        planning = dataclasses.replace(planning, artifact_dir="")
    own_files = [f for f in source_files if not _same(f, their_files)]
    kept += [f for f in source_files if f not in own_files]
    return planning, own_files, kept


def cancel_array(scheduler: Scheduler, array: str, task_ids: list[str], *, timeout_s: float = 90.0,
                 poll_s: float = 2.0) -> tuple[dict[str, JobState], dict[str, JobState]]:
    """Cancel every task of the array at once (`scancel J`) and wait until each has ended: one state query per
    wait for all of them. Returns the states before and after; SchedulerError when a task is still live after the
    timeout."""
    before = scheduler.states(task_ids)
    if all(state.is_terminal for state in before.values()):
        return before, before
    scheduler.cancel(array)
    deadline = time.monotonic() + timeout_s
    with Waiting(f"the {len(task_ids)} tasks of array {array} to end after the cancel (at most {timeout_s:.0f} s)") \
            as told:
        while True:
            states = scheduler.states(task_ids)
            live = [task for task, state in states.items() if not state.is_terminal]
            if not live:
                return before, states
            if time.monotonic() > deadline:
                raise SchedulerError(f"array {array}: task(s) {', '.join(live[:5])} still live after `scancel "
                                     f"{array}`; check `squeue -r -j {array}`; nothing was deleted")
            told.detail = f"{len(live)} still live"
            time.sleep(poll_s)


def link_restarted(old_tasks: list[RunRecord], new_runs: list[RunRecord]) -> list[str]:
    """Each new task names the old task of its index as restarted_from; the old ones are marked restarted. Returns
    the new job ids."""
    by_task = {task_of(r): r for r in old_tasks}
    linked = []
    for new in new_runs:
        old = by_task.get(task_of(new))
        if old is not None:
            new.restarted_from = old.run_id
            new.save()
            linked.append(new.job_id)
    for old in old_tasks:
        old.ended = "restarted"
        old.save()
    return linked
