"""Runs that name no folder write their trainer's default one under the job's folder (a bare `SummaryWriter()`:
`runs/`; HF Trainer: `trainer_output/`; Lightning: `lightning_logs/`): a second such run launched from the same folder
while the first runs is warned by the own-folder check (launch/checks/own_folder_defaults.py); real local jobs."""

from __future__ import annotations

import json
from pathlib import Path

from e2e_helpers import make_project, submitted_job_id, wait_for
from guarded_sbatch.scheduler.interface import JobState
from guarded_sbatch.scheduler.local import LocalScheduler

TRAINER = """import time

from torch.utils.tensorboard import SummaryWriter

writer = SummaryWriter()  # runs/<date>_<host>: the default folder
for step in range(600):
    writer.add_scalar("train/loss", 1.0 / (step + 1), step)
    writer.flush()
    time.sleep(0.1)
"""

JOB = """#!/bin/bash
#SBATCH --ntasks=1
#SBATCH --time=00:10:00
set -euo pipefail
python default_writer.py
"""


def _own_folder(stdout: str) -> dict[str, object]:
    return next(c for c in json.loads(stdout)["checks"] if c["name"] == "own-folder")


def test_a_second_run_writing_the_default_folder_from_one_folder_is_warned(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    (project.root / "default_writer.py").write_text(TRAINER)
    (project.root / "default.sh").write_text(JOB)
    scheduler = LocalScheduler(project.state_dir / "local-jobs")
    first = project.cli("--guard-backend", "local", "--job-name", f"{project.name}-a", "default.sh")
    assert first.returncode == 0, first.stderr
    job = submitted_job_id(first.stdout)
    try:
        wait_for(lambda: scheduler.state(job) is JobState.RUNNING, 60, 0.5, "the first run to start")
        second = project.cli_here("check", "--json", "--guard-backend", "local", "--job-name", f"{project.name}-b",
                                  "default.sh")
        check = _own_folder(second.stdout)
        assert check["status"] == "warned", check
        assert f"run(s) {project.name}-a (job {job}, RUNNING) launched from this folder name no folder" in str(
            check["finding"]), check
        assert f"{project.root}/runs/" in str(check["finding"]), check
    finally:
        scheduler.cancel(job)
    wait_for(lambda: scheduler.state(job).is_terminal, 60, 0.5, "the first run to end")
    after = project.cli_here("check", "--json", "--guard-backend", "local", "--job-name", f"{project.name}-c",
                             "default.sh")
    assert _own_folder(after.stdout)["status"] == "passed", after.stdout  # free again once it has ended
