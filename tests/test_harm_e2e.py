"""End to end on the local backend and the dev Slurm: a text log whose first line has a 20-digit step
and whose loss turns NaN stops the run with evidence; a FIFO where the log should be is a WAIT at the
first poll, never a hang."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from e2e_helpers import Project, make_project, submitted_job_id, wait_for
from guarded_sbatch.scheduler.interface import JobState

HUGE_STEP_THEN_NAN = """#!/bin/bash
#SBATCH --job-name=hostile-step-log-run
#SBATCH --time=00:05:00
#SBATCH --mem=400M
cd "${SLURM_SUBMIT_DIR:-.}"
echo "global_step=99999999999999999999 loss=1.0" >> train.log
for i in $(seq 1 600); do
  if [ "$i" -lt 40 ]; then v="1.$((99 - i))"; else v=nan; fi
  echo "global_step=$i loss=$v" >> train.log
  sleep 0.1
done
"""

FIFO_LOG = """#!/bin/bash
#SBATCH --job-name=fifo-log-run-a
#SBATCH --time=00:05:00
#SBATCH --mem=400M
cd "${SLURM_SUBMIT_DIR:-.}"
sleep 120
"""


def _scheduler(project: Project, backend: str):  # type: ignore[no-untyped-def]
    if backend == "local":
        from guarded_sbatch.scheduler.local import LocalScheduler

        return LocalScheduler(project.state_dir / "local-jobs")
    from guarded_sbatch.scheduler.slurm import SlurmScheduler

    return SlurmScheduler(state_dir=project.root / ".slurm-cache")


def _launch(project: Project, backend: str, script: str, text: str) -> tuple[str, dict]:
    (project.root / script).write_text(text)
    result = project.cli("--guard-backend", backend, "--guard-log", "train.log",
                         "--guard-waive", "config-diff=a synthetic log", script)
    assert result.returncode == 0, result.stderr
    job_id = submitted_job_id(result.stdout)
    return job_id, project.run_record(job_id)


BACKENDS = ["local", pytest.param("slurm", marks=pytest.mark.slurm)]


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    if request.param == "slurm":
        request.getfixturevalue("slurm_cluster")
    return request.param


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_twenty_digit_step_then_nan_stops_with_evidence(backend: str, tmp_path: Path) -> None:
    project = make_project(tmp_path, fast_interval=2.0)
    job_id, record = _launch(project, backend, "hostile.sh", HUGE_STEP_THEN_NAN)
    scheduler = _scheduler(project, backend)
    try:
        assert wait_for(lambda: scheduler.state(job_id).is_terminal, 150, 1, "training job to end")
        assert scheduler.state(job_id) is JobState.CANCELLED
        assert wait_for(lambda: scheduler.state(record["sidecar_id"]).is_terminal, 90, 1, "sidecar to end")
        output = project.sidecar_output(job_id)
        assert "- Decision: STOP" in output and "non_finite_loss" in output, output[-2000:]
        assert "internal error" not in output and "Traceback" not in output
        assert "step beyond" in output  # the 20-digit step was dropped, with a note
        evidence = project.state_dir / "runs" / record["run_id"] / "evidence"
        verdict = json.loads((evidence / "evidence.json").read_text())["verdict"]
        assert verdict["decision"] == "STOP" and verdict["reason"] == "non_finite_loss"
        for path in evidence.iterdir():
            assert path.stat().st_mode & 0o077 == 0, path
        assert evidence.stat().st_mode & 0o077 == 0
    finally:
        for job in (job_id, record["sidecar_id"]):
            try:
                scheduler.cancel(job)
            except Exception:  # noqa: BLE001 - already gone
                pass


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_a_fifo_log_is_a_wait_at_the_first_poll(backend: str, tmp_path: Path) -> None:
    import os

    project = make_project(tmp_path, fast_interval=2.0)
    os.mkfifo(project.root / "train.log")
    job_id, record = _launch(project, backend, "fifo.sh", FIFO_LOG)
    scheduler = _scheduler(project, backend)
    try:
        output = wait_for(lambda: "Decision:" in (text := project.sidecar_output(job_id)) and text, 90, 1,
                          "the sidecar's first report")
        first = output.split("- Decision:", 1)[1].splitlines()[0]
        assert first.strip() == "WAIT", output[-2000:]
        assert "FIFO" in output and "source_unreadable" in output
        state_file = project.state_dir / "runs" / record["run_id"] / "sidecar-state.json"
        wait_for(state_file.is_file, 30, 0.5, "the sidecar's state (saved just after its report)")
        state = json.loads(state_file.read_text())
        assert state["checks"] <= 2  # the WAIT came at the first poll (the state may lag one save)
    finally:
        for job in (job_id, record["sidecar_id"]):
            try:
                scheduler.cancel(job)
            except Exception:  # noqa: BLE001
                pass
