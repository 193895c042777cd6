"""sbatch's habits, on every backend, with real runs of the example trainer: --wait blocks until the job has
ended (its guard submitted first) and exits with the job's code; --quiet prints nothing but errors;
--parsable prints the id alone."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from e2e_helpers import Project, make_project

CRASH = "exit 3\n"


def _backend(name: str) -> object:
    return pytest.param(name, marks=[pytest.mark.slurm]) if name == "slurm" else name


BACKENDS = [_backend("local"), _backend("slurm")]


def _project(tmp_path: Path, request: pytest.FixtureRequest, backend: str) -> Project:
    if backend == "slurm":
        request.getfixturevalue("slurm_cluster")
    return make_project(tmp_path, fast_interval=1.0, job_poll=2.0)


def _runs(project: Project) -> list[dict]:
    return json.loads(project.cli_here("status", "--json", check=True).stdout)["runs"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_wait_blocks_until_the_job_ends_and_exits_with_its_code(tmp_path: Path, request: pytest.FixtureRequest,
                                                                backend: str) -> None:
    project = _project(tmp_path, request, backend)
    script = project.root / "train.sh"
    script.write_text(script.read_text() + CRASH)  # trains, then the script exits 3
    started = time.monotonic()
    result = project.cli("--guard-backend", backend, "--wait", "--parsable", "train.sh", "--steps", "60",
                         "--step-seconds", "0.05", timeout=300)
    took = time.monotonic() - started
    assert result.returncode == 3, result.stderr  # the job's own exit code, as sbatch --wait gives it
    job_id = result.stdout.strip()
    assert job_id.isdigit(), result.stdout  # --parsable: the id alone
    assert f"waiting for job {job_id} to end (--wait)" in result.stderr and f"job {job_id} ended: FAILED" in result.stderr
    (row,) = [r for r in _runs(project) if r["job_id"] == job_id]
    assert row["state"] == "FAILED" and row["exit"] == "3:0" and row["sidecar_id"]  # it was guarded throughout
    assert took >= 3.0  # 60 steps of 0.05 s: it did wait for them


@pytest.mark.parametrize("backend", BACKENDS)
def test_quiet_prints_nothing_but_errors(tmp_path: Path, request: pytest.FixtureRequest, backend: str) -> None:
    project = _project(tmp_path, request, backend)
    result = project.cli("--guard-backend", backend, "--quiet", "--wait", "train.sh", "--steps", "20",
                         "--step-seconds", "0.01", timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "" and result.stderr == ""
    (row,) = _runs(project)
    assert row["state"] == "COMPLETED" and row["exit"] == "0:0"
    blocked = project.cli("--guard-backend", backend, "--quiet", "--job-name", "test", "train.sh")
    assert blocked.returncode == 3 and "BLOCKED by: run-name" in blocked.stderr  # errors still say why
