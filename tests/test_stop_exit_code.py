"""A guard STOP gives the same exit code on both backends (issue 36: it was `0:15` on the local backend and `0:0` on
Slurm for the same event). Read off the dev Slurm 22.05 for a cancelled job: scontrol `ExitCode=0:15` while it
knows the job; once it has forgotten it (MinJobAge), sacct's job line says `0:0` and its `.batch` line `0:15`.
`status` and `show` report the batch step's code, as scontrol did and as the local backend does."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from e2e_helpers import Project, make_project, submitted_job_id, wait_for
from guarded_sbatch.scheduler import get_scheduler
from guarded_sbatch.scheduler.interface import JobState

pytestmark = [pytest.mark.waits, pytest.mark.slurm]
TB = "runs/synthetic-tanh-mlp-bs64-lr5e-2"
# Slurm's batch step: 0:15 when the cancel's TERM ended the shell; 15:0 (one run in some ten, read off this cluster)
# when the shell saw its trainer's TERM first, printed "Terminated" and left with that status. Both are the TERM.
TERM_CODES = (-15, 15)


def _diverging_launch(tmp_path: Path, backend: str) -> tuple[Project, str]:
    project = make_project(tmp_path / backend)
    done = project.cli("--guard-backend", backend, "--guard-tb", TB, "train.sh", "--steps", "4000", "--diverge-at", "60")
    assert done.returncode == 0, done.stderr
    return project, submitted_job_id(done.stdout)


def _status_row(project: Project, job_id: str) -> dict:
    done = project.cli("status", "--json", check=True)
    return next(row for row in json.loads(done.stdout)["runs"] if row["job_id"] == job_id)


def _scontrol_knows(job_id: str) -> bool:
    return subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, timeout=30).returncode == 0


def test_a_guard_stop_reports_0_15_on_the_local_backend_and_on_slurm_after_scontrol_forgot_the_job(
        slurm_cluster: None, tmp_path: Path) -> None:
    launched = {backend: _diverging_launch(tmp_path, backend) for backend in ("slurm", "local")}  # both run at once
    rows = {}
    for backend, (project, job_id) in launched.items():
        scheduler = get_scheduler(backend, state_dir=tmp_path / f"{backend}-asker") if backend == "slurm" else \
            get_scheduler("local", root=project.state_dir / "local-jobs")
        assert wait_for(lambda: scheduler.state(job_id).is_terminal, 150, 1, f"the {backend} job to be stopped")
        assert "- Decision: STOP" in wait_for(lambda: "FINAL_SUMMARY" in (o := project.sidecar_output(job_id)) and o,
                                               60, 1, f"the {backend} sidecar's FINAL_SUMMARY")
        if backend == "slurm":
            assert wait_for(lambda: not _scontrol_knows(job_id), 180, 2, "slurmctld to forget the job (MinJobAge)")
            stranger = get_scheduler("slurm", state_dir=tmp_path / "stranger")  # nothing remembered: sacct alone
            info = stranger.info(job_id)
            assert info.state is JobState.CANCELLED and info.exit_code in TERM_CODES, info
        rows[backend] = _status_row(project, job_id)
        shown = project.cli("show", job_id, "--plain", check=True).stdout
        assert f"stopped by guard, exit {rows[backend]['exit']}" in shown, shown[:600]
    assert rows["slurm"]["state"] == rows["local"]["state"] == "CANCELLED", rows
    assert rows["local"]["exit"] == "0:15" and rows["local"]["exit_code"] == -15, rows
    assert (rows["slurm"]["exit"], rows["slurm"]["exit_code"]) in (("0:15", -15), ("15:0", 15)), rows
