"""The pre-flight refuses a folder that a live guarded run already writes (one config launched twice), names the
folder and the fix, and lets a waiver through (launch/checks/own_folder.py); real jobs, local and on the dev Slurm."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from e2e_helpers import make_project, submitted_job_id, wait_for
from guarded_sbatch.scheduler import get_scheduler
from guarded_sbatch.scheduler.interface import JobState
from guarded_sbatch.scheduler.local import LocalScheduler

TB = "runs/synthetic-tanh-mlp-bs64-lr5e-2"  # the config's logdir


def _own_folder(result_stdout: str) -> dict:
    return next(c for c in json.loads(result_stdout)["checks"] if c["name"] == "own-folder")


@pytest.mark.parametrize("backend", ["local", pytest.param("slurm", marks=pytest.mark.slurm)])
def test_one_config_launched_twice_is_refused_then_waived(tmp_path: Path, backend: str,
                                                          request: pytest.FixtureRequest) -> None:
    if backend == "slurm":
        request.getfixturevalue("slurm_cluster")
    project = make_project(tmp_path)
    scheduler = LocalScheduler(project.state_dir / "local-jobs") if backend == "local" else get_scheduler("slurm")
    first = project.cli("--guard-backend", backend, "train.sh", "--steps", "4000", "--step-seconds", "0.05")
    assert first.returncode == 0, first.stderr
    first_id = submitted_job_id(first.stdout)
    jobs = [first_id]
    try:
        wait_for(lambda: scheduler.state(first_id) is JobState.RUNNING, 120, 0.5, "the first run to start")
        other = f"{project.name}-again"
        second = project.cli("--guard-backend", backend, "--job-name", other, "train.sh", "--steps", "100")
        folder = str(project.root / TB)
        assert second.returncode == 3, second.stderr
        assert second.stdout == ""  # nothing submitted
        line = next(li for li in second.stderr.splitlines() if li.startswith("[FAIL] own-folder:"))
        assert f"{folder} is written by run {project.name} (job {first_id}, RUNNING)" in line
        # the fix in the forms this script takes: the config key it came from, and the flag train.py parses
        assert f"give this run its own logdir: set logdir: runs/{other} in configs/" in line
        assert f"; or --logdir runs/{other} on the launcher line" in line
        assert 'runs/${SLURM_JOB_ID}' in line and "--guard-waive own-folder=" in line

        fixed = project.cli_here("check", "--json", "--guard-backend", backend, "--job-name", other, "train.sh",
                                 "--logdir", f"runs/{other}")
        assert _own_folder(fixed.stdout)["status"] == "passed", fixed.stderr

        waived = project.cli("--guard-backend", backend, "--job-name", other,
                             "--guard-waive", "own-folder=comparing two seeds in one folder on purpose",
                             "train.sh", "--steps", "100", "--step-seconds", "0.01")
        assert waived.returncode == 0, waived.stderr
        second_id = submitted_job_id(waived.stdout)
        jobs.append(second_id)
        assert "(waived: comparing two seeds in one folder on purpose)" in waived.stderr
        record = project.run_record(second_id)
        assert {"check": "own-folder", "reason": "comparing two seeds in one folder on purpose"} in record["waivers"]
    finally:
        for job in jobs:
            scheduler.cancel(job)
    # every run cancelled, the pending one too (its supervisor may still be starting when the first has ended)
    wait_for(lambda: all(scheduler.state(job).is_terminal for job in jobs), 60, 0.5, "both runs to end")
    after = project.cli_here("check", "--json", "--guard-backend", backend, "--job-name", f"{project.name}-third",
                             "train.sh")
    assert _own_folder(after.stdout)["status"] == "passed", after.stderr  # a finished run's folder is free again


def test_a_loop_of_launches_writing_a_folder_per_job_passes(tmp_path: Path) -> None:
    """A sweep as a shell loop of one script whose trainer writes runs/sweep-${SLURM_JOB_ID}: the same name three
    times, each job its own folder, nothing refused; the name is still taken for a script whose folder is fixed."""
    project = make_project(tmp_path)
    script = project.root / "train.sh"
    plain = script.read_text()
    config = "--config configs/synthetic-tanh-mlp.yaml"
    (project.root / "sweep.sh").write_text(plain.replace(config, f'{config} --logdir "runs/sweep-${{SLURM_JOB_ID}}"'))
    scheduler = LocalScheduler(project.state_dir / "local-jobs")
    jobs: list[str] = []
    try:
        for _ in range(3):
            launch = project.cli("--guard-backend", "local", "sweep.sh", "--steps", "4000", "--step-seconds", "0.05")
            assert launch.returncode == 0, launch.stderr
            jobs.append(submitted_job_id(launch.stdout))
            run_name = next(li for li in launch.stderr.splitlines() if li.startswith("[ok  ] run-name:"))
            if len(jobs) > 1:  # the earlier jobs of the loop hold the name, queued or running
                assert "a queued or running job has it too" in run_name and "sweep-${SLURM_JOB_ID}" in run_name
            own = next(li for li in launch.stderr.splitlines() if "own-folder:" in li)
            assert own.startswith("[ok  ]") and "new for each job" in own
        wait_for(lambda: scheduler.state(jobs[0]) is JobState.RUNNING, 120, 0.5, "the first run to start")
        fixed = project.cli_here("check", "--guard-backend", "local", "train.sh")  # its folder is the config's logdir
        assert fixed.returncode == 3, fixed.stderr
        assert any(li.startswith("[FAIL] run-name:") and "is taken" in li for li in fixed.stderr.splitlines())
    finally:
        for job in jobs:
            scheduler.cancel(job)
    wait_for(lambda: all(scheduler.state(job).is_terminal for job in jobs), 60, 0.5, "the loop's runs to end")
    folders = {job: [s["locator"] for s in project.run_record(job)["sources"]["specs"] if s["kind"] == "tensorboard"]
               for job in jobs}
    assert all(found == [str(project.root / f"runs/sweep-{job}")] for job, found in folders.items()), folders
