"""The per-user shared monitor: many runs, one batched scheduler query per poll, each run stopped,
reported and noted on its own, resumed after a restart with no stop lost or repeated."""

from __future__ import annotations

import io
import math
from pathlib import Path

from source_writers import tb_event, write_tb_events
from guarded_sbatch.scheduler.interface import BackendTraits
from guarded_sbatch.records import monitor_registry as registry
from guarded_sbatch.scheduler.interface import JobInfo, JobState
from guarded_sbatch.sidecar.shared_monitor import REPORT_FILE, SharedMonitor
from guarded_sbatch.sidecar.state import SidecarState
from watch_records import register


class FakeSlurm:
    """States of a few jobs; counts the calls that would reach slurmctld."""

    name = "slurm"
    traits = BackendTraits()

    def __init__(self, jobs: list[str]) -> None:
        self.jobs = {job: JobState.RUNNING for job in jobs}
        self.batched = 0
        self.single = 0
        self.cancelled: list[str] = []

    def states(self, job_ids: list[str]) -> dict[str, JobState]:
        self.batched += 1
        return {job: self.jobs.get(job, JobState.UNKNOWN) for job in job_ids}

    def state(self, job_id: str) -> JobState:
        self.single += 1
        return self.jobs.get(job_id, JobState.UNKNOWN)

    def info(self, job_id: str) -> JobInfo:
        return JobInfo(job_id, self.jobs[job_id], owner="me")

    def cancel(self, job_id: str, *, signal_name: str | None = None) -> None:
        self.cancelled.append(job_id)
        self.jobs[job_id] = JobState.CANCELLED

    def live_steps(self, job_id: str) -> list[str]:
        return []  # no steps: the cancel ends the job

    def current_user(self) -> str:
        return "me"


def _run(tmp_path: Path, folder: Path, job: str, nan_from: int | None) -> Path:
    run_dir = tmp_path / f"run-{job}"
    events = []
    for step in range(1, 121):
        loss = math.nan if nan_from is not None and step >= nan_from else 1.0 / step + 0.5
        events += [tb_event(step, "train/loss", loss), tb_event(step, "train/lr", 0.01)]
    write_tb_events(run_dir / "tb", events)
    register(folder, job, run_dir, f"run-{job}", tb=run_dir / "tb", notes=tmp_path / "NOTES.md",
             sidecar={"fast_interval_s": 60.0, "job_poll_s": 300.0})
    return run_dir


def _monitor(folder: Path, slurm: FakeSlurm, clock: list[float]) -> SharedMonitor:
    def sleep(seconds: float) -> None:
        clock[0] += seconds

    return SharedMonitor(folder, slurm, io.StringIO(), job_id="900", clock=lambda: clock[0], sleep=sleep)  # type: ignore[arg-type]


def test_one_monitor_stops_only_the_broken_run_and_resumes_after_a_restart(tmp_path: Path) -> None:
    folder = tmp_path / "monitor"
    registry.write_monitor(folder, "900")
    jobs = [str(100 + i) for i in range(6)]
    slurm = FakeSlurm(jobs)
    dirs = {job: _run(tmp_path, folder, job, nan_from=60 if job == "102" else None) for job in jobs}
    clock = [1000.0]
    monitor = _monitor(folder, slurm, clock)
    for _ in range(3):
        monitor.poll(clock[0])
        clock[0] += 60
    assert slurm.cancelled == ["102"]
    assert slurm.batched == 1  # one query for all six runs (the next is due after job_poll_s)
    report = (dirs["102"] / REPORT_FILE).read_text()
    assert "FINAL_SUMMARY" in report and "non_finite_loss" in report
    assert list((dirs["102"] / "evidence").iterdir())
    assert (tmp_path / "NOTES.md").read_text().count("STOP") == 1
    for job in jobs:
        if job != "102":
            assert "FINAL_SUMMARY" not in (dirs[job] / REPORT_FILE).read_text()
            assert not (dirs[job] / "evidence").exists()
    assert {r["job_id"] for r in registry.registrations(folder)} == set(jobs) - {"102"}

    # the monitor job is requeued: a new process resumes the five live runs; nothing is stopped twice
    restarted = _monitor(folder, slurm, clock)
    restarted.poll(clock[0])
    assert set(restarted.runs) == set(jobs) - {"102"}
    assert all(SidecarState.load(dirs[j] / "sidecar-state.json").restarts == 1 for j in restarted.runs)
    assert slurm.cancelled == ["102"]

    # every training job ends: the monitor notices at its next scheduler query and leaves
    for job in jobs:
        slurm.jobs[job] = JobState.COMPLETED
    clock[0] += 300
    assert restarted.run() == 0
    assert registry.registrations(folder) == []
    assert registry.read_monitor(folder) is None
    assert (tmp_path / "NOTES.md").read_text().count("STOP") == 1


def test_a_stop_requested_by_a_killed_monitor_is_not_repeated(tmp_path: Path) -> None:
    folder = tmp_path / "monitor"
    slurm = FakeSlurm(["200"])
    run_dir = _run(tmp_path, folder, "200", nan_from=60)
    state = SidecarState(started_at=1.0, stop_requested_at=5.0)  # the earlier process died after scancel
    state.save(run_dir / "sidecar-state.json")
    clock = [1000.0]
    monitor = _monitor(folder, slurm, clock)
    monitor.poll(clock[0])
    assert slurm.cancelled == []
    assert "stop requested already" in (run_dir / REPORT_FILE).read_text()


def test_launches_register_with_one_monitor_job_and_a_full_monitor_sends_them_back(tmp_path: Path) -> None:
    from guarded_sbatch.records.registry import RunRecord
    from guarded_sbatch.launch.monitor_registration import SharedMonitorOptions, register_with_monitor

    class Submitting(FakeSlurm):
        def __init__(self) -> None:
            super().__init__([])
            self.submitted: list[str] = []

        def submit(self, request: object) -> str:
            job = str(900 + len(self.submitted))
            self.submitted.append(getattr(request, "script").read_text())
            self.jobs[job] = JobState.PENDING
            return job

    slurm = Submitting()
    folder = tmp_path / "monitor"
    options = SharedMonitorOptions(max_runs=2, time_limit="1-00:00:00", qos="lowprio")
    ids = [register_with_monitor(slurm, RunRecord(f"r{i}", f"run{i}", "slurm", str(100 + i)), options,  # type: ignore[arg-type]
                                 folder=folder) for i in range(3)]
    assert ids == ["900", "900", None]  # one monitor; the third run gets a sidecar of its own
    assert len(slurm.submitted) == 1 and "--time=1-00:00:00" in slurm.submitted[0] and "--qos=lowprio" in slurm.submitted[0]
    assert "--signal=B:USR1@" in slurm.submitted[0] and "--requeue" in slurm.submitted[0]
    slurm.jobs["900"] = JobState.COMPLETED  # the monitor left: the next launch submits a new one
    registry.retire(folder, "100")
    assert register_with_monitor(slurm, RunRecord("r3", "run3", "slurm", "103"), options,  # type: ignore[arg-type]
                                 folder=folder) == "901"


def test_a_run_whose_node_died_is_told_so_once_and_nothing_is_stopped(tmp_path: Path) -> None:
    """The per-run view answers node_losses as data ([]: the monitor's one query is all it asks), so a run that ends
    NODE_FAIL is named a dead node's end, as a per-job sidecar names it, without a per-run accounting call."""
    folder = tmp_path / "monitor"
    registry.write_monitor(folder, "900")
    slurm = FakeSlurm(["300"])
    run_dir = _run(tmp_path, folder, "300", nan_from=None)
    clock = [1000.0]
    monitor = _monitor(folder, slurm, clock)
    monitor.poll(clock[0])
    slurm.jobs["300"] = JobState.NODE_FAIL
    clock[0] += 300
    monitor.poll(clock[0])
    report = (run_dir / REPORT_FILE).read_text()
    assert report.count("job 300 ended NODE_FAIL: a node died, not the training") == 1, report
    assert slurm.cancelled == [] and slurm.batched == 2
