"""A job that dies before its first step (its parser refuses the command line, an import fails) is named by its
sidecar as a crash quoting the error line, in the sidecar's report and in `status` — not a wait for data that
never comes. A real train.sh, a real python program, the local backend and the dev Slurm."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from e2e_helpers import make_project, submitted_job_id, wait_for
from guarded_sbatch.scheduler.local import LocalScheduler
from guarded_sbatch.scheduler.slurm import SlurmScheduler
from guarded_sbatch.sources.textlog_crash import CrashTracker

PROGRAM = """import argparse
parser = argparse.ArgumentParser()
parser.add_argument("--config", required=True)
parser.add_argument("--steps", type=int, default=100)
args = parser.parse_args()
for step in range(args.steps):
    print(f"step {step} loss {1.0 / (step + 1):.4f}", flush=True)
"""
ERROR_LINE = "the following arguments are required: --config"


def _project(tmp_path: Path, program: str = PROGRAM):  # type: ignore[no-untyped-def]
    project = make_project(tmp_path, fast_interval=1.0, job_poll=3.0)
    (project.root / "early.py").write_text(program)
    (project.root / "early.sh").write_text(
        f"#!/bin/bash\n#SBATCH --job-name={project.name}\n#SBATCH --time=00:05:00\npython early.py --steps 50\n")
    return project


def _launch_and_watch(project, backend: str, state_of, waive: str = "arguments") -> tuple[str, dict]:  # type: ignore[no-untyped-def]
    result = project.cli("--guard-backend", backend, "--guard-waive", f"{waive}=the test's job dies on purpose",
                         "early.sh")
    assert result.returncode == 0, result.stderr
    job_id = submitted_job_id(result.stdout)
    record = project.run_record(job_id)
    wait_for(lambda: state_of(record["sidecar_id"]).is_terminal, 150, 1, "the sidecar to end")
    return job_id, record


def _assert_named_as_crash(project, job_id: str, record: dict, error: str) -> None:  # type: ignore[no-untyped-def]
    output = project.sidecar_output(job_id)
    assert "- Decision: STOP (crashed)" in output, output
    assert error in output and "no_data" not in output
    verdict = json.loads((project.state_dir / "runs" / record["run_id"] / "evidence" / "evidence.json").read_text())
    assert verdict["verdict"]["reason"] == "crashed"
    status = project.cli("status", "--json", check=True)
    row = next(r for r in json.loads(status.stdout)["runs"] if r["job_id"] == job_id)
    assert (row["decision"], row["reason"]) == ("STOP", "crashed"), row


def test_parser_errors_are_crashes_quoting_their_error_line() -> None:
    for text, expected in (
        ("usage: train.py [-h] --config CONFIG\n       [--steps STEPS]\ntrain.py: error: " + ERROR_LINE,
         "train.py: error: " + ERROR_LINE),
        ("Usage: train.py [OPTIONS]\nTry 'train.py --help' for help.\n\nError: Missing option '--config'.",
         "Error: Missing option '--config'."),
    ):
        tracker = CrashTracker()
        for line in text.splitlines():
            tracker.feed(line, None)
        assert tracker.crash is not None and tracker.crash.exception == expected
    tracker = CrashTracker()  # an "error:" line on its own (a trainer's logging) is no crash
    tracker.feed("eval: error: 0.12", 10)
    assert tracker.crash is None


def test_a_program_that_dies_on_its_arguments_is_a_crash_on_the_local_backend(tmp_path: Path) -> None:
    project = _project(tmp_path)
    scheduler = LocalScheduler(project.state_dir / "local-jobs")
    job_id, record = _launch_and_watch(project, "local", scheduler.state)
    _assert_named_as_crash(project, job_id, record, ERROR_LINE)


def test_an_import_error_before_the_first_step_is_a_crash_on_the_local_backend(tmp_path: Path) -> None:
    project = _project(tmp_path, "import numpy_that_is_not_installed\n" + PROGRAM.replace("required=True", "default='x'"))
    scheduler = LocalScheduler(project.state_dir / "local-jobs")
    job_id, record = _launch_and_watch(project, "local", scheduler.state, waive="interpreter")
    _assert_named_as_crash(project, job_id, record, "No module named 'numpy_that_is_not_installed'")


@pytest.mark.slurm
def test_a_program_that_dies_on_its_arguments_is_a_crash_on_slurm(slurm_cluster: None, tmp_path: Path) -> None:
    project = _project(tmp_path)
    slurm = SlurmScheduler(state_dir=tmp_path / "test-slurm-cache")
    job_id, record = _launch_and_watch(project, "slurm", slurm.state)
    _assert_named_as_crash(project, job_id, record, ERROR_LINE)
