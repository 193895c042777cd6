"""One watcher for a job array: every task a run of its own, adopted once it starts (a throttled array's later
tasks wait), all tasks asked about in one scheduler query per poll, a STOP cancelling that task alone, and the
watcher leaving within one query of the last task's end. (The same on the dev Slurm: tests/test_array_slurm.py.)"""

from __future__ import annotations

import io
import math
from pathlib import Path

from source_writers import tb_event, write_tb_events
from watch_records import register
from guarded_sbatch.scheduler.interface import BackendTraits
from guarded_sbatch.records import monitor_registry as registry
from guarded_sbatch.scheduler.interface import JobInfo, JobState
from guarded_sbatch.sidecar.shared_monitor import REPORT_FILE, SharedMonitor
from guarded_sbatch.sidecar.state import SidecarState

ARRAY = "77"
TASKS = [f"{ARRAY}_{t}" for t in range(4)]


class FakeArray:
    """The states of one array's tasks as Slurm would answer them; counts the calls that would reach slurmctld."""

    name = "slurm"
    traits = BackendTraits()

    def __init__(self) -> None:
        self.tasks = {task: JobState.PENDING for task in TASKS}
        self.asked: list[list[str]] = []
        self.single = 0
        self.infos = 0
        self.cancelled: list[str] = []

    def states(self, job_ids: list[str]) -> dict[str, JobState]:
        self.asked.append(list(job_ids))
        return {job: self.tasks.get(job, JobState.UNKNOWN) for job in job_ids}

    def state(self, job_id: str) -> JobState:
        self.single += 1
        return self.tasks.get(job_id, JobState.UNKNOWN)

    def info(self, job_id: str) -> JobInfo:
        self.infos += 1
        return JobInfo(job_id, self.tasks[job_id], owner="me")

    def cancel(self, job_id: str, *, signal_name: str | None = None) -> None:
        self.cancelled.append(job_id)
        self.tasks[job_id] = JobState.CANCELLED

    def live_steps(self, job_id: str) -> list[str]:
        return []  # no steps: the cancel ends the job

    def current_user(self) -> str:
        return "me"


def _task(tmp_path: Path, folder: Path, task: str, nan_from: int | None, steps: int = 120) -> Path:
    run_dir = tmp_path / f"run-{task}"
    events = []
    for step in range(1, steps + 1):
        loss = math.nan if nan_from is not None and step >= nan_from else 1.0 / step + 0.5
        events += [tb_event(step, "train/loss", loss), tb_event(step, "train/lr", 0.01)]
    write_tb_events(run_dir / "tb", events)
    # the task's record: its folder and output, as the launch wrote them
    register(folder, task, run_dir, f"lrsweep-{task}", tb=run_dir / "tb", notes=tmp_path / "NOTES.md",
             sidecar={"fast_interval_s": 60.0, "job_poll_s": 30.0},
             sources={"workdir": str(run_dir), "stdout": str(run_dir / f"slurm-{task}.out"), "since": 1.0})
    return run_dir


# the scheduler's side, as time passes: the throttle (%2) starts a task when another ends
TIMELINE = [(1060, "77_2", JobState.RUNNING), (1200, "77_0", JobState.COMPLETED), (1200, "77_3", JobState.RUNNING),
            (1400, "77_3", JobState.COMPLETED)]


def _watcher(folder: Path, slurm: FakeArray, clock: list[float]) -> SharedMonitor:

    def sleep(seconds: float) -> None:
        clock[0] += seconds
        for when, task, state in TIMELINE:
            if clock[0] >= when and not slurm.tasks[task].is_terminal and slurm.tasks[task] is not state:
                slurm.tasks[task] = state

    return SharedMonitor(folder, slurm, io.StringIO(), job_id="900", clock=lambda: clock[0], sleep=sleep)  # type: ignore[arg-type]


def test_tasks_are_adopted_as_they_start_and_only_the_nan_task_is_cancelled(tmp_path: Path) -> None:
    folder = tmp_path / "array-77"
    registry.write_monitor(folder, "900")
    slurm = FakeArray()
    dirs = {task: _task(tmp_path, folder, task, nan_from=30 if task == "77_2" else None) for task in TASKS}
    slurm.tasks["77_0"] = slurm.tasks["77_1"] = JobState.RUNNING
    clock = [1000.0]
    watcher = _watcher(folder, slurm, clock)

    watcher.poll(clock[0])
    assert set(watcher.runs) == {"77_0", "77_1"} and set(watcher.waiting) == {"77_2", "77_3"}
    assert not (dirs["77_2"] / REPORT_FILE).exists()  # a pending task has no loop, no report yet
    slurm.tasks["77_1"] = JobState.COMPLETED  # the throttle lets 77_2 start next

    assert watcher.run() == 0  # runs until every task has ended, then leaves
    assert slurm.cancelled == ["77_2"]
    assert slurm.single == 1  # the stop's confirmation; every other question was one query for the array
    assert slurm.infos == 1  # the stop checks whose job it cancels; a task's folder and output come from its record
    assert all(sorted(asked) == sorted(set(asked)) for asked in slurm.asked)
    assert len(slurm.asked) <= (clock[0] - 1000) / 30 + 2
    for task in TASKS:
        state = SidecarState.load(dirs[task] / "sidecar-state.json")
        report = (dirs[task] / REPORT_FILE).read_text()
        assert state.finished, task
        assert state.last_decision == ("STOP" if task == "77_2" else "CONTINUE"), (task, state.last_decision)
        assert bool(state.evidence) == (task == "77_2")
        assert report.count("FINAL_SUMMARY") == (1 if task == "77_2" else 0), report[-1500:]
        assert f"run-{task}/tb" in report and not any(f"run-{o}/tb" in report for o in TASKS if o != task)
    assert (tmp_path / "NOTES.md").read_text().count("STOP") == 1
    assert registry.registrations(folder) == [] and registry.read_monitor(folder) is None


def test_the_watcher_leaves_within_one_query_of_the_last_tasks_end(tmp_path: Path) -> None:
    folder = tmp_path / "array-77"
    slurm = FakeArray()
    for task in TASKS:
        _task(tmp_path, folder, task, nan_from=None)
        slurm.tasks[task] = JobState.RUNNING
    clock = [2000.0]
    ended_at = 2125.0

    def sleep(seconds: float) -> None:
        clock[0] += seconds
        if clock[0] >= ended_at:
            slurm.tasks.update({task: JobState.COMPLETED for task in TASKS})

    watcher = SharedMonitor(folder, slurm, io.StringIO(), job_id="900", clock=lambda: clock[0], sleep=sleep)  # type: ignore[arg-type]
    assert watcher.run() == 0
    assert clock[0] - ended_at <= 30 + 1, clock[0] - ended_at
    assert slurm.cancelled == [] and slurm.single == 0


def test_a_task_cancelled_before_it_started_is_retired_without_reading_anything(tmp_path: Path) -> None:
    folder = tmp_path / "array-77"
    slurm = FakeArray()
    run_dir = tmp_path / "never"
    register(folder, "77_3", run_dir, "lrsweep-77_3")
    slurm.tasks["77_3"] = JobState.CANCELLED
    clock = [3000.0]
    watcher = _watcher(folder, slurm, clock)
    watcher.poll(clock[0])
    assert watcher.runs == {} and watcher.waiting == {}
    assert "ended CANCELLED" in (run_dir / REPORT_FILE).read_text()
    assert slurm.cancelled == []


def test_sacct_tells_a_task_cancelled_while_pending_from_one_still_pending() -> None:
    from guarded_sbatch.scheduler.slurm_parse import sacct_states

    text = "636_0|COMPLETED\n636_3|CANCELLED by 0\n636_[2,5-7%1]|PENDING\n"  # 636_1 was cancelled before it started
    states = sacct_states(text, ["636_0", "636_1", "636_2", "636_3", "636_6", "700_1", "636"])
    assert {job: state.value for job, state in states.items()} == {
        "636_0": "COMPLETED", "636_1": "CANCELLED", "636_2": "PENDING", "636_3": "CANCELLED", "636_6": "PENDING",
        "700_1": "UNKNOWN", "636": "UNKNOWN"}
