"""Ctrl-C at any moment of a launch leaves nothing running, or the training job with its guard; never an
unguarded job. A real launch of the example project is interrupted as a terminal does it (SIGINT to the
launch's whole process group, its children included) at many points around "Clear: submitting now."."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from e2e_helpers import Project, make_project
from guarded_sbatch.core.fsutil import read_json
from guarded_sbatch.scheduler.local import LocalScheduler

# seconds after "Clear: submitting now." appears; None: while the pre-flight still runs
DELAYS: list[float | None] = [None, 0.0, 0.001, 0.003, 0.006, 0.01, 0.02, 0.04, 0.07, 0.1, 0.15, 0.25, 0.4]


def _interrupted_launch(project: Project, delay: float | None, backend: str = "local") -> tuple[int, str]:
    proc = subprocess.Popen([sys.executable, "-m", "guarded_sbatch", "--guard-backend", backend, "train.sh",
                             "--steps", "4000", "--step-seconds", "0.05"], cwd=project.root, env=project.env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            start_new_session=True, text=True)
    assert proc.stderr is not None
    if delay is None:
        time.sleep(0.3)
    else:
        for line in proc.stderr:
            if "submitting now." in line:
                break
        time.sleep(delay)
    try:
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C on a terminal does
    except ProcessLookupError:
        pass  # it had finished already
    rest = proc.stderr.read()
    return proc.wait(timeout=120), rest


def _jobs(scheduler: LocalScheduler) -> dict[str, dict]:
    jobs = {}
    for folder in sorted(scheduler.root.iterdir()) if scheduler.root.is_dir() else []:
        spec = read_json(folder / "spec.json")
        if folder.name.isdigit() and spec:
            jobs[folder.name] = spec
    return jobs


def test_an_interrupted_launch_never_leaves_an_unguarded_job(tmp_path: Path) -> None:
    project = make_project(tmp_path, fast_interval=1.0)
    scheduler = LocalScheduler(project.state_dir / "local-jobs")
    outcomes = []
    try:
        for delay in DELAYS:
            before = set(_jobs(scheduler))
            code, stderr = _interrupted_launch(project, delay)
            time.sleep(0.5)  # a supervisor started just now records its first state
            new = {job: spec for job, spec in _jobs(scheduler).items() if job not in before}
            training = [job for job, spec in new.items() if not spec["name"].startswith("sidecar-")]
            guarded = {spec["after_job"] for spec in new.values() if spec["name"].startswith("sidecar-")}
            for job in training:
                state = scheduler.state(job)
                assert job in guarded or (state.is_terminal and not scheduler.info(job).start_time), (
                    f"interrupt {delay}: job {job} is {state.value} without a sidecar")
            # 130 (or killed by the SIGINT itself): interrupted; 0: it came after the launch had finished
            assert code in (0, 130, -signal.SIGINT), (delay, code, stderr[-1500:])
            assert "Traceback" not in stderr and "internal error" not in stderr, stderr
            outcomes.append("guarded" if training else "nothing")
            for job in new:  # the next launch may use the name again
                scheduler.cancel(job)
            for job in new:
                deadline = time.monotonic() + 30
                while not scheduler.state(job).is_terminal and time.monotonic() < deadline:
                    time.sleep(0.2)
    finally:
        for job in _jobs(scheduler):
            scheduler.cancel(job)
    # both sides of the line were hit: some interrupts came before anything was submitted, some after
    assert "nothing" in outcomes and "guarded" in outcomes, outcomes


SLURM_DELAYS: list[float | None] = [None, 0.0, 0.005, 0.02, 0.05, 0.1, 0.2, 0.4]


def _slurm_jobs(name: str) -> dict[str, tuple[str, str]]:
    """{job id: (name, dependency)} of the queued or running jobs of this run name and of its sidecar."""
    out = subprocess.run(["squeue", "-h", "-o", "%i|%j|%E"], capture_output=True, text=True, timeout=30, check=True)
    jobs = {}
    for line in out.stdout.splitlines():
        job, job_name, dependency = (line.split("|") + ["", ""])[:3]
        if job_name in (name, f"sidecar-{name}"):
            jobs[job.strip()] = (job_name, dependency)
    return jobs


@pytest.mark.slurm
def test_an_interrupted_slurm_launch_never_leaves_an_unguarded_job(tmp_path: Path, slurm_cluster: None) -> None:
    """sbatch is a child of the launch: Ctrl-C reaches it too, so it must not die between queuing the job and
    printing its id (it inherits the blocked SIGINT)."""
    project = make_project(tmp_path, fast_interval=1.0)
    outcomes = []
    try:
        for delay in SLURM_DELAYS:
            code, stderr = _interrupted_launch(project, delay, backend="slurm")
            jobs = _slurm_jobs(project.name)
            training = [job for job, (job_name, _) in jobs.items() if job_name == project.name]
            sidecars = [job for job, (job_name, _) in jobs.items() if job_name.startswith("sidecar-")]
            # (a started job's dependency reads "(null)" in squeue: count the pairs; each round starts from none)
            assert len(sidecars) >= len(training), f"interrupt {delay}: a job without a sidecar ({jobs}); {stderr[-800:]}"
            assert code in (0, 130, -signal.SIGINT), (delay, code, stderr[-1500:])
            assert "Traceback" not in stderr and "internal error" not in stderr, stderr
            outcomes.append("guarded" if training else "nothing")
            if jobs:
                subprocess.run(["scancel", *jobs], timeout=30, check=False)
                deadline = time.monotonic() + 60
                while _slurm_jobs(project.name) and time.monotonic() < deadline:
                    time.sleep(0.5)
    finally:
        leftover = _slurm_jobs(project.name)
        if leftover:
            subprocess.run(["scancel", *leftover], timeout=30, check=False)
    assert "nothing" in outcomes and "guarded" in outcomes, outcomes
