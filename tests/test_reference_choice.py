"""The reference a launch is diffed against is one of the user's runs that finished healthy (COMPLETED, its
sidecar's last check CONTINUE), or the one they name; a new project has none ("no reference run yet"), and a
sibling config that was tried and diverged never becomes one, however similar. Real runs on the local backend."""

from __future__ import annotations

import json
from pathlib import Path

from e2e_helpers import Project, make_project, submitted_job_id, wait_for
from guarded_sbatch.scheduler.interface import JobState
from guarded_sbatch.scheduler.local import LocalScheduler

CONFIG = "configs/synthetic-tanh-mlp.yaml"
SIBLING = "configs/synthetic-tanh-mlp-lr5e-1.yaml"


def _config_diff(project: Project) -> dict:
    report = json.loads(project.cli_here("check", "--json", "--guard-backend", "local", "train.sh").stdout)
    return next(check for check in report["checks"] if check["name"] == "config-diff")


def _run_to_its_end(project: Project, *words: str) -> dict:
    result = project.cli("--guard-backend", "local", *words)
    assert result.returncode == 0, result.stderr
    job_id = submitted_job_id(result.stdout)
    jobs = LocalScheduler(project.state_dir / "local-jobs")
    record = project.run_record(job_id)
    wait_for(lambda: jobs.state(record["sidecar_id"]).is_terminal, 180, 1, "the run's sidecar to end")
    state = json.loads((project.state_dir / "runs" / record["run_id"] / "sidecar-state.json").read_text())
    return {"job": jobs.state(job_id), "decision": state["last_decision"], "run_id": record["run_id"]}


def test_only_a_run_that_finished_healthy_becomes_the_reference(tmp_path: Path) -> None:
    project = make_project(tmp_path, fast_interval=1.0, job_poll=3.0, history=False)
    config = (project.root / CONFIG).read_text()
    (project.root / SIBLING).write_text(config.replace("lr: 0.05", "lr: 0.5").replace(
        "logdir: runs/synthetic-tanh-mlp-bs64-lr5e-2", "logdir: runs/synthetic-tanh-mlp-bs64-lr5e-1"))
    script = (project.root / "train.sh").read_text()
    (project.root / "sibling.sh").write_text(script.replace(CONFIG, SIBLING).replace(
        f"--job-name={project.name}", f"--job-name={project.name}-lr5e-1"))

    first = _config_diff(project)
    assert first["status"] == "warned" and "no reference run yet" in first["finding"], first

    diverged = _run_to_its_end(project, "sibling.sh", "--steps", "3000", "--diverge-at", "40")
    assert diverged["job"] is JobState.CANCELLED and diverged["decision"] == "STOP", diverged
    after_sibling = _config_diff(project)
    assert after_sibling["status"] == "warned" and "no reference run yet" in after_sibling["finding"], after_sibling
    assert SIBLING not in json.dumps(after_sibling)

    healthy = _run_to_its_end(project, "train.sh", "--steps", "300", "--step-seconds", "0.02")
    assert healthy["job"] is JobState.COMPLETED and healthy["decision"] == "CONTINUE", healthy
    chosen = _config_diff(project)
    (line,) = [item for item in chosen["evidence"] if item.startswith("reference:")]
    assert healthy["run_id"] in line and CONFIG in line and SIBLING not in line, line
