"""The local backend runs job arrays as sbatch does (`--array 0-7%2`, `1,3,5`, `0-15:4`, `#SBATCH --array`):
each task once, under a job id of its own, with Slurm's array variables, at most %N at once, its output per
task (`slurm-%A_%a.out`), and each task named `A_T` to state(), states() and cancel(). The values the variables
take were read off the dev Slurm 22.05 (sbatch --array=1,3,6 and 0-15:4%2: COUNT, MIN, MAX, STEP; the last
task runs under the array's own id)."""

from __future__ import annotations

from pathlib import Path

import pytest
from e2e_helpers import wait_for
from guarded_sbatch.core.errors import SchedulerError, UsageError
from guarded_sbatch.scheduler.interface import JobState, SubmitRequest
from guarded_sbatch.scheduler.local import LocalScheduler
from guarded_sbatch.sbatch.array import parse_array_spec

VARIABLES = ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT",
             "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_MAX", "SLURM_ARRAY_TASK_STEP")
PROBE = "\n".join(f'echo "{name}=${name}"' for name in VARIABLES)


@pytest.fixture(autouse=True)
def _own_id_sequence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))


def _submit(tmp_path: Path, body: str, *options: str) -> tuple[LocalScheduler, str]:
    script = tmp_path / "task.sh"
    script.write_text(f"#!/bin/bash\n{body}\n")
    scheduler = LocalScheduler(tmp_path / "jobs")
    return scheduler, scheduler.submit(SubmitRequest(script=script, sbatch_options=options, workdir=tmp_path))


def _variables(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if line.startswith("SLURM_"))


def test_an_eight_task_array_runs_two_at_a_time_each_with_its_variables_and_output(tmp_path: Path) -> None:
    body = f'echo "start $(date +%s.%N)" > "span-$SLURM_ARRAY_TASK_ID"\n{PROBE}\nsleep 0.6\n' \
           'echo "end $(date +%s.%N)" >> "span-$SLURM_ARRAY_TASK_ID"'
    scheduler, array = _submit(tmp_path, body, "--array=0-7%2")
    assert scheduler.state(f"{array}_7") is JobState.PENDING  # held back by the %2 at first
    held = wait_for(lambda: scheduler.info(f"{array}_7").reason == "JobArrayTaskLimit" or None, 10, 0.05,
                    "the last task to be held by the limit")
    assert held
    assert wait_for(lambda: scheduler.state(array).is_terminal, 60, 0.2, "the array to end")
    states = scheduler.states([f"{array}_{task}" for task in range(8)] + [array])
    assert set(states.values()) == {JobState.COMPLETED}, states
    job_ids = set()
    for task in range(8):
        seen = _variables(tmp_path / f"slurm-{array}_{task}.out")
        assert seen == {**seen, "SLURM_ARRAY_JOB_ID": array, "SLURM_ARRAY_TASK_ID": str(task),
                        "SLURM_ARRAY_TASK_COUNT": "8", "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_MAX": "7",
                        "SLURM_ARRAY_TASK_STEP": "1"}, seen
        job_ids.add(seen["SLURM_JOB_ID"])
        if task == 7:
            assert seen["SLURM_JOB_ID"] == array  # as on Slurm: the last task keeps the array's id
    assert len(job_ids) == 8
    spans = [tuple(float(line.split()[1]) for line in (tmp_path / f"span-{task}").read_text().splitlines())
             for task in range(8)]
    for start, _ in spans:  # how many ran at each task's start, itself included
        assert sum(1 for s, e in spans if s <= start < e) <= 2, spans
    assert max(sum(1 for s, e in spans if s <= start < e) for start, _ in spans) == 2, spans  # and it did run two


def test_cancelling_one_task_leaves_its_siblings_and_cancelling_the_array_ends_all(tmp_path: Path) -> None:
    scheduler, array = _submit(tmp_path, 'trap "exit 1" TERM\nsleep 60 & wait', "--array=0-4%2")
    assert wait_for(lambda: scheduler.states([f"{array}_0", f"{array}_1"]) ==
                    {f"{array}_0": JobState.RUNNING, f"{array}_1": JobState.RUNNING}, 20, 0.1, "two tasks to run")
    scheduler.cancel(f"{array}_4")  # still pending: it never starts
    scheduler.cancel(f"{array}_0")
    assert wait_for(lambda: scheduler.state(f"{array}_0") is JobState.CANCELLED, 20, 0.1, "task 0 to end")
    assert wait_for(lambda: scheduler.state(f"{array}_2") is JobState.RUNNING, 20, 0.1, "task 2 to take its slot")
    assert scheduler.state(f"{array}_1") is JobState.RUNNING and scheduler.state(f"{array}_3") is JobState.PENDING
    assert scheduler.state(f"{array}_4") is JobState.CANCELLED and not (tmp_path / f"slurm-{array}_4.out").exists()
    assert scheduler.state(array) is JobState.RUNNING
    assert set(scheduler.job_process_groups()) == {f"{array}_1", f"{array}_2"}  # named as their run records are
    scheduler.cancel(array)  # the running tasks and the pending one
    assert wait_for(lambda: scheduler.state(array).is_terminal, 20, 0.1, "the array to end")
    ended = scheduler.states([f"{array}_{task}" for task in range(5)])
    assert set(ended.values()) == {JobState.CANCELLED}, ended
    assert not (tmp_path / f"slurm-{array}_3.out").exists()
    assert scheduler.info(f"{array}_1").exit_code == 1  # its own trap's status, as Slurm reports a batch script's
    assert scheduler.info(f"{array}_3").exit_code == 0  # never ran: no batch step, sacct's 0:0
    assert scheduler.info(array).state is JobState.CANCELLED


def test_directives_lists_and_steps_as_slurm_sets_them(tmp_path: Path) -> None:
    script = tmp_path / "task.sh"
    script.write_text(f"#!/bin/bash\n#SBATCH --array=0-15:4\n#SBATCH --output=steps-%A-%a-%j.txt\n{PROBE}\n")
    scheduler = LocalScheduler(tmp_path / "jobs")
    array = scheduler.submit(SubmitRequest(script=script, workdir=tmp_path))
    listed = scheduler.submit(SubmitRequest(script=script, sbatch_options=("-a", "1,3,6", "-o", "list-%a.txt"),
                                            workdir=tmp_path))
    assert wait_for(lambda: scheduler.state(array).is_terminal and scheduler.state(listed).is_terminal, 30, 0.2,
                    "both arrays to end")
    for task in (0, 4, 8, 12):
        [path] = tmp_path.glob(f"steps-{array}-{task}-*.txt")
        seen = _variables(path)
        assert path.name == f"steps-{array}-{task}-{seen['SLURM_JOB_ID']}.txt"
        assert (seen["SLURM_ARRAY_TASK_COUNT"], seen["SLURM_ARRAY_TASK_MIN"], seen["SLURM_ARRAY_TASK_MAX"],
                seen["SLURM_ARRAY_TASK_STEP"]) == ("4", "0", "12", "4")
    for task in (1, 3, 6):
        seen = _variables(tmp_path / f"list-{task}.txt")
        assert (seen["SLURM_ARRAY_TASK_ID"], seen["SLURM_ARRAY_TASK_COUNT"], seen["SLURM_ARRAY_TASK_MIN"],
                seen["SLURM_ARRAY_TASK_MAX"], seen["SLURM_ARRAY_TASK_STEP"]) == (str(task), "3", "1", "6", "1")
    with pytest.raises(SchedulerError, match="no local array task"):
        scheduler.state(f"{listed}_2")


@pytest.mark.parametrize("text, tasks, throttle", [
    ("0-7%2", tuple(range(8)), 2), ("1,3,5", (1, 3, 5), None), ("0-15:4", (0, 4, 8, 12), None),
    ("5,1-3,2", (1, 2, 3, 5), None),
])
def test_array_specs_read_as_sbatch_reads_them(text: str, tasks: tuple[int, ...], throttle: int | None) -> None:
    spec = parse_array_spec(text)
    assert (spec.tasks, spec.throttle) == (tasks, throttle)


@pytest.mark.parametrize("text", ["", "0-", "3-1", "a", "0-7%0", "0-7%x", "0-20000000", "1,,2"])
def test_a_bad_array_spec_is_one_clear_line(text: str) -> None:
    with pytest.raises(UsageError, match="--array="):
        parse_array_spec(text)


def test_a_dependency_on_an_array_task_waits_for_that_task(tmp_path: Path) -> None:
    scheduler, array = _submit(tmp_path, 'sleep "$((SLURM_ARRAY_TASK_ID * 2))"', "--array=0-1%1")
    (tmp_path / "after.sh").write_text("#!/bin/bash\ndate +%s.%N\n")
    after = scheduler.submit(SubmitRequest(script=tmp_path / "after.sh", workdir=tmp_path,
                                           sbatch_options=(f"--dependency=after:{array}_1", "-o", "after.out")))
    assert wait_for(lambda: scheduler.state(after).is_terminal, 30, 0.2, "the dependent job to end")
    assert scheduler.state(after) is JobState.COMPLETED
    task_start = scheduler.info(f"{array}_1").start_time
    assert task_start is not None and float((tmp_path / "after.out").read_text()) >= task_start
