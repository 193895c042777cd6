"""One config launched twice, the way a researcher does it (a second job name, the config's logdir unchanged, so both
runs write one folder), through guarded-sbatch itself: the second launch is refused with the fix; with the waiver the
NaN run is cancelled by its own sidecar, the healthy one completes untouched, and no report of either cites the
other's event file. Local backend and the dev Slurm."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from e2e_helpers import make_project, submitted_job_id, wait_for
from guarded_sbatch.scheduler import get_scheduler
from guarded_sbatch.scheduler.interface import JobState
from guarded_sbatch.scheduler.local import LocalScheduler

LOGDIR = "runs/synthetic-tanh-mlp-bs64-lr5e-2"  # the config's logdir, shared by both launches


@pytest.mark.waits  # two runs to their end and their sidecars to theirs
@pytest.mark.parametrize("backend", ["local", pytest.param("slurm", marks=pytest.mark.slurm)])
def test_one_config_launched_twice_each_run_is_judged_on_its_own_files(
        tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> None:
    if backend == "slurm":
        request.getfixturevalue("slurm_cluster")
    project = make_project(tmp_path, fast_interval=2.0, job_poll=5.0)
    scheduler = LocalScheduler(project.state_dir / "local-jobs") if backend == "local" else get_scheduler("slurm")
    healthy = project.cli("--guard-backend", backend, "train.sh", "--steps", "900", "--step-seconds", "0.04",
                          "--flush-secs", "1")
    assert healthy.returncode == 0, healthy.stderr
    healthy_id = submitted_job_id(healthy.stdout)
    jobs = [healthy_id]
    try:
        wait_for(lambda: scheduler.state(healthy_id) is JobState.RUNNING, 180, 0.5, "the healthy run to start")
        other = f"{project.name}-seed2"
        refused = project.cli("--guard-backend", backend, "--job-name", other, "train.sh", "--nan-at", "150")
        assert refused.returncode == 3 and refused.stdout == "", refused.stderr
        assert f"give this run its own logdir: set logdir: runs/{other} in configs/" in refused.stderr
        assert f"--logdir runs/{other} on the launcher line" in refused.stderr  # train.py parses --logdir

        broken = project.cli("--guard-backend", backend, "--job-name", other,
                             "--guard-waive", "own-folder=two seeds side by side in one folder",
                             "train.sh", "--steps", "6000", "--step-seconds", "0.04", "--nan-at", "150",
                             "--flush-secs", "1")  # runs 4 min unless cancelled: only its sidecar's STOP ends it early
        assert broken.returncode == 0, broken.stderr
        broken_id = submitted_job_id(broken.stdout)
        jobs.append(broken_id)

        stopped = wait_for(lambda: "FINAL_SUMMARY" in (out := project.sidecar_output(broken_id)) and out, 240,
                           what="the NaN run's sidecar to STOP")
        assert "- Decision: STOP" in stopped
        wait_for(lambda: scheduler.state(broken_id).is_terminal, 60, what="the NaN run to be cancelled")
        assert scheduler.state(broken_id) is JobState.CANCELLED
        # the STOP was the NaN run's alone (on a loaded machine the healthy run may have finished by now)
        assert scheduler.state(healthy_id) in (JobState.RUNNING, JobState.COMPLETED)

        wait_for(lambda: scheduler.state(healthy_id).is_terminal, 240, 1.0, "the healthy run to complete")
        assert scheduler.state(healthy_id) is JobState.COMPLETED
        report = wait_for(lambda: "- Decision:" in (out := project.sidecar_output(healthy_id)) and out, 60,
                          what="the healthy run's report")
        assert "Decision: STOP" not in report
    finally:
        for job in jobs:
            if not scheduler.state(job).is_terminal:
                scheduler.cancel(job)

    files = sorted(project.root.joinpath(LOGDIR).glob("events.out.tfevents.*"),
                   key=lambda path: int(path.name.split(".")[3]))
    assert len(files) == 2, files  # two writers in the one folder: the healthy run's file is the older one
    healthy_file, broken_file = (path.name for path in files)
    evidence = json.loads((project.state_dir / "runs" / project.run_record(broken_id)["run_id"] / "evidence"
                           / "evidence.json").read_text())
    inspected = [Path(p).name for p in evidence["files_inspected"]]
    assert broken_file in inspected and healthy_file not in inspected, inspected
    assert healthy_file not in project.sidecar_output(broken_id)
    assert broken_file not in project.sidecar_output(healthy_id)
