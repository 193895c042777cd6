"""The first vertical slice on the local backend: launch → sidecar → read → decide → cancel."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from e2e_helpers import make_project, submitted_job_id, wait_for
from guarded_sbatch.scheduler.interface import JobState, SubmitRequest
from guarded_sbatch.scheduler.local import LocalScheduler

TB = "runs/synthetic-tanh-mlp-bs64-lr5e-2"


def _scheduler(project) -> LocalScheduler:  # type: ignore[no-untyped-def]
    return LocalScheduler(project.state_dir / "local-jobs")


def test_diverging_run_is_cancelled_by_its_sidecar(tmp_path: Path) -> None:
    project = make_project(tmp_path, evidence_plot=True)
    notes = tmp_path / "NOTES.md"
    result = project.cli(
        "--guard-backend",
        "local",
        "--guard-tb",
        TB,
        "--guard-notes",
        str(notes),
        "train.sh",
        "--steps",
        "3000",
        "--diverge-at",
        "60",
    )
    assert result.returncode == 0, result.stderr
    job_id = submitted_job_id(result.stdout)
    assert result.stdout.strip() == f"Submitted batch job {job_id}"  # nothing else on stdout
    scheduler = _scheduler(project)
    record = project.run_record(job_id)
    final = wait_for(lambda: (s := scheduler.state(job_id)).is_terminal and s, 120, what="training job to end")
    assert final is JobState.CANCELLED
    sidecar_state = wait_for(
        lambda: scheduler.state(record["sidecar_id"]).is_terminal and scheduler.info(record["sidecar_id"]),
        60,
        what="sidecar to exit",
    )
    assert sidecar_state.state is JobState.COMPLETED and sidecar_state.exit_code == 0
    output = project.sidecar_output(job_id)
    assert "FINAL_SUMMARY" in output and "- Decision: STOP" in output
    evidence = json.loads((project.state_dir / "runs" / record["run_id"] / "evidence" / "evidence.json").read_text())
    assert evidence["verdict"]["decision"] == "STOP"
    assert evidence["verdict"]["reason"] in {"non_finite_loss", "divergence", "loss_spike", "grad_explosion"}
    assert (project.state_dir / "runs" / record["run_id"] / "evidence" / "metrics.png").stat().st_size > 1000
    assert "STOP" in notes.read_text()


def test_healthy_run_completes_and_sidecar_exits_within_a_minute(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    result = project.cli("--guard-backend", "local", "--guard-tb", TB, "train.sh", "--steps", "200", "--step-seconds", "0.02")
    assert result.returncode == 0, result.stderr
    job_id = submitted_job_id(result.stdout)
    scheduler = _scheduler(project)
    record = project.run_record(job_id)
    assert wait_for(lambda: scheduler.state(job_id).is_terminal, 120, what="training to end")
    info = scheduler.info(job_id)
    assert info.state is JobState.COMPLETED
    sidecar = wait_for(
        lambda: scheduler.state(record["sidecar_id"]).is_terminal and scheduler.info(record["sidecar_id"]),
        60,
        what="sidecar to exit",
    )
    assert sidecar.end_time - info.end_time < 60
    output = project.sidecar_output(job_id)
    assert "FINAL_SUMMARY" not in output and "Decision: STOP" not in output
    assert "ended COMPLETED" in output


def test_parsable_prints_the_id_alone(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    result = project.cli(
        "--guard-backend", "local", "--guard-tb", TB, "--parsable", "train.sh", "--steps", "5", "--step-seconds", "0"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().isdigit()


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["missing.sh"], "not found"),
        (["--guard-backend", "nowhere", "train.sh"], "slurm or local"),
        (["--guard-waive", "eta", "train.sh"], "needs a reason"),
    ],
)
def test_bad_input_gives_one_line_and_nonzero_exit(tmp_path: Path, args: list[str], fragment: str) -> None:
    project = make_project(tmp_path)
    result = project.cli(*args)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and fragment in lines[0] and "Traceback" not in result.stderr


def test_status_shows_a_live_eta_from_the_observed_step_rate(tmp_path: Path) -> None:
    project = make_project(tmp_path, fast_interval=1.0)
    result = project.cli("--guard-backend", "local", "--guard-tb", TB, "train.sh")  # 3 epochs x 200 steps
    assert result.returncode == 0, result.stderr
    job_id = submitted_job_id(result.stdout)

    def live_row() -> dict | None:
        status = project.cli_here("status", "--json", check=True)
        rows = [r for r in json.loads(status.stdout)["runs"] if r["job_id"] == job_id]
        return rows[0] if rows and rows[0]["eta_kind"] == "live" else None

    row = wait_for(live_row, 60, 1, "a live ETA")
    assert row["state"] == "RUNNING" and row["total_steps"] == 600 and row["steps_per_s"] > 0
    assert row["decision"] in {"CONTINUE", "WAIT"} and isinstance(row["last_step"], int)
    table = project.cli_here("status", check=True).stdout
    after = live_row() or row  # the live ETA moves with the step rate: the table's is one of those around it
    assert job_id in table and (row["eta"] in table or after["eta"] in table), (row["eta"], after["eta"], table)
    _scheduler(project).cancel(job_id)


def test_a_job_does_not_inherit_the_submitting_process_wandb_service(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wandb.init in the submitting process leaves WANDB_SERVICE behind; a job that joined that service would
    be refused its own run id once requeued. Every other variable still reaches the job, as with sbatch."""
    monkeypatch.setenv("WANDB_SERVICE", "3-4242-unix-/tmp/wandb-service.sock")
    monkeypatch.setenv("GUARDED_TEST_FLAVOUR", "mint")
    script = tmp_path / "job.sh"
    script.write_text('#!/bin/bash\necho "service=${WANDB_SERVICE-unset} flavour=$GUARDED_TEST_FLAVOUR" > seen.txt\n')
    scheduler = LocalScheduler(tmp_path / "local-jobs")
    job_id = scheduler.submit(SubmitRequest(script=script, sbatch_options=("--output=/dev/null",), workdir=tmp_path))
    wait_for(lambda: scheduler.state(job_id) is JobState.COMPLETED, 30, 0.1, "the job to finish")
    assert (tmp_path / "seen.txt").read_text().strip() == "service=unset flavour=mint"


@pytest.mark.parametrize("option", ["--hold", "--begin=now+1hour"])
def test_what_the_local_backend_cannot_run_is_refused_before_anything_is_submitted(tmp_path: Path, option: str) -> None:
    """sbatch would hold a job or start it later; the local backend runs a job now, so it refuses these instead
    of running something else than what was asked (an array it runs: tests/test_local_arrays.py)."""
    project = make_project(tmp_path)
    result = project.cli("--guard-backend", "local", option, "train.sh")
    assert result.returncode == 2 and "Submitted batch job" not in result.stdout, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("guarded-sbatch: error")]
    assert len(errors) == 1 and "training job not submitted" in errors[0] and option.split("=")[0] in errors[0]
    jobs = project.state_dir / "local-jobs"
    assert not jobs.exists() or not any(jobs.iterdir()), list(jobs.iterdir())
