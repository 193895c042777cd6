"""`guarded-sbatch run -- COMMAND` pins the run's sources like the sbatch form: the record's `sources`, the job's
environment holding what the pre-flight says it exports, the same run-name check, and its real W&B offline run
read by the sidecar."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from conftest import require
from e2e_helpers import Project, make_project, wait_for
from package_extras import recorded_tb
from guarded_sbatch.cli.run import run_under_guard
from guarded_sbatch.sources.kind_mlflow import MLFLOW_TAG
from guarded_sbatch.sources.run_sources import RunSources
from guarded_sbatch.scheduler.local import LocalScheduler

CONFIG = "configs/synthetic-tanh-mlp.yaml"
NAME = "synthetic-regression-tanh-mlp-bs64-lr0.05"
WANDB_ENV = {"WANDB_MODE": "offline", "WANDB_PROJECT": "run-command-e2e", "WANDB_SILENT": "true",
             "WANDB_DISABLE_GIT": "true", "WANDB_CONSOLE": "off"}
PROBE = """import json, os, sys
if os.environ.get("PROBE_WANDB"):  # a program that may report to W&B: its run is pinned and said
    import wandb
names = ("WANDB_RUN_ID", "WANDB_RESUME", "MLFLOW_RUN_CONTEXT", "SLURM_JOB_ID", "SLURM_JOB_NAME")
print("ENV " + json.dumps({name: os.environ.get(name) for name in names}), flush=True)
"""


def _project(tmp_path: Path, **env: str) -> Project:
    project = make_project(tmp_path, fast_interval=1.0)
    for key in ("WANDB_RUN_ID", "WANDB_RESUME", "WANDB_DIR", "MLFLOW_RUN_CONTEXT", "GUARDED_SBATCH_BACKEND"):
        project.env.pop(key, None)
    project.env.update(env)
    return project


def _record(project: Project, job_id: str) -> dict:
    return project.run_record(job_id)


def _pinned(record: dict, kind: str) -> tuple[str, str]:
    """(run id, tag) of the tracker run the launch gave the job, as its record keeps it."""
    sources = RunSources.from_json(record["sources"])
    pinned = sources.pinned(kind) if sources is not None else None
    return (pinned.writer.run_id, pinned.writer.tag) if pinned is not None else ("", "")


def test_the_jobs_environment_holds_what_the_preflight_says_it_exports(tmp_path: Path) -> None:
    project = _project(tmp_path)
    (project.root / "env_probe.py").write_text(PROBE)
    result = project.cli("run", "--guard-run-name", NAME, "--guard-waive", "config-diff=an environment probe",
                         "--guard-waive", "monitoring=an environment probe", "--", "python", "env_probe.py")
    assert result.returncode == 0, result.stderr
    job_id = result.stdout.strip()
    record = _record(project, job_id)
    assert record["script"] == "python" and record["script_args"] == ["env_probe.py"] and record["launched_by"] == "run"
    sources = record["sources"]
    (wandb_id, _), (_, mlflow_tag) = _pinned(record, "wandb"), _pinned(record, "mlflow")
    assert wandb_id and mlflow_tag and sources["stdout"] == str(project.root / f"slurm-{job_id}.out")
    promised = re.search(r"W&B run (\w+) \(exported as WANDB_RUN_ID\)", result.stderr)
    assert promised and promised.group(1) == wandb_id
    scheduler = LocalScheduler(project.state_dir / "local-jobs")
    wait_for(lambda: scheduler.state(job_id).is_terminal, 60, 0.2, "the probe to end")
    line = next(li for li in Path(sources["stdout"]).read_text().splitlines() if li.startswith("ENV "))
    seen = json.loads(line[4:])
    assert seen["WANDB_RUN_ID"] == wandb_id and seen["WANDB_RESUME"] == "allow"
    assert json.loads(seen["MLFLOW_RUN_CONTEXT"]) == {MLFLOW_TAG: mlflow_tag}
    assert seen["SLURM_JOB_ID"] == job_id and seen["SLURM_JOB_NAME"] == NAME


def test_its_wandb_offline_run_is_the_one_the_sidecar_reads(tmp_path: Path) -> None:
    project = _project(tmp_path, **WANDB_ENV)
    # W&B's offline writer has its first points on disk a few seconds in: a jump 1 s in is decided on TensorBoard
    result = project.cli("run", "--guard-run-name", NAME, "--", "python", "train.py", "--config", CONFIG, "--wandb",
                         "--steps", "3000", "--step-seconds", "0.02", "--diverge-at", "500", timeout=180)
    assert result.returncode == 0, result.stderr
    job_id = result.stdout.strip()
    record = _record(project, job_id)
    run_id = _pinned(record, "wandb")[0]
    assert recorded_tb(record) == [str(project.root / "runs" / "synthetic-tanh-mlp-bs64-lr5e-2")]
    scheduler = LocalScheduler(project.state_dir / "local-jobs")
    wait_for(lambda: scheduler.state(job_id).is_terminal, 180, 1, "the diverging run to be stopped")
    wait_for(lambda: scheduler.state(record["sidecar_id"]).is_terminal, 60, 1, "its watcher to exit")
    output = project.sidecar_output(job_id)
    assert "- Decision: STOP" in output, output[-3000:]
    assert "wandb_ok" in output and run_id in output, output[-3000:]
    logs = list((project.root / "wandb").glob(f"offline-run-*-{run_id}/run-{run_id}.wandb"))
    assert logs, sorted(p.name for p in (project.root / "wandb").iterdir())  # the job's W&B run has the id it was given


def _run_name_line(text: str) -> str:
    return next(li for li in text.splitlines() if "] run-name:" in li)


def _run_form_check(project: Project, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                    *options: str) -> tuple[int, str]:
    monkeypatch.chdir(project.root)
    for key, value in project.env.items():
        if key.startswith(("GUARDED_SBATCH_", "PATH")):
            monkeypatch.setenv(key, value)
    code = run_under_guard([*options, "--", "python", "train.py", "--config", CONFIG], check_only=True)
    return code, capsys.readouterr().err


def test_the_run_name_check_is_the_sbatch_forms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    project = _project(tmp_path)
    outputs = project.root / "outputs"
    config = Path(project.env["GUARDED_SBATCH_USER_CONFIG"])
    config.write_text(f'run_roots = ["{outputs}"]\n' + config.read_text())
    finished = "synthetic-tanh-mlp-bs64-lr5e-2-finished"
    (outputs / finished).mkdir(parents=True)  # left by the finished runs of that name
    (outputs / finished / "train.log").write_text("step 1 loss 0.5\n")
    for name, status in ((finished, "FAIL"), (f"{project.name}-free", "ok  ")):
        sbatch_form = project.cli_here("check", "--guard-backend", "local", "--job-name", name, "train.sh")
        code, run_form = _run_form_check(project, monkeypatch, capsys, "--job-name", name)
        assert _run_name_line(run_form) == _run_name_line(sbatch_form.stderr)
        assert _run_name_line(run_form).startswith(f"[{status}] run-name:")
        checked = [li.strip() for li in run_form.splitlines() if li.strip().startswith("checked ")]
        assert checked == [f"checked {outputs / name}"]  # the run roots, nothing under the staging folder
        if status == "FAIL":
            assert f"output folder {outputs / finished} already exists" in _run_name_line(run_form) and code == 3
    assert os.environ.get("GUARDED_SBATCH_STATE_DIR") == project.env["GUARDED_SBATCH_STATE_DIR"]


def test_in_tmux_the_command_gets_the_same_environment(tmp_path: Path) -> None:
    import shutil
    import subprocess

    require(shutil.which("tmux") is not None, "tmux not installed")
    project = _project(tmp_path, TMUX_TMPDIR=str(tmp_path))
    (project.root / "env_probe.py").write_text(PROBE + "import time; time.sleep(1)\n")
    # a tmux server already running (started without the run's variables) gives a new session its own environment
    subprocess.run(["tmux", "new-session", "-d", "-s", "already-there"], env=project.env, check=True, timeout=30)
    try:
        result = project.cli("run", "--guard-run-name", NAME, "--guard-tmux", "probe-session",
                             "--guard-waive", "config-diff=an environment probe",
                             "--guard-waive", "monitoring=an environment probe", "--", "python", "env_probe.py")
        assert result.returncode == 0, result.stderr
        job_id = result.stdout.strip()
        record = _record(project, job_id)
        scheduler = LocalScheduler(project.state_dir / "local-jobs")
        wait_for(lambda: scheduler.state(job_id).is_terminal, 60, 0.5, "the tmux probe to end")
        logs = list((project.state_dir / "run-staging").glob("*/output.log"))
        line = next(li for log in logs for li in log.read_text().splitlines() if li.startswith("ENV "))
        seen = json.loads(line[4:])
        assert seen["WANDB_RUN_ID"] == _pinned(record, "wandb")[0] and seen["WANDB_RESUME"] == "allow"
        assert json.loads(seen["MLFLOW_RUN_CONTEXT"]) == {MLFLOW_TAG: _pinned(record, "mlflow")[1]}
    finally:
        subprocess.run(["tmux", "kill-server"], env=project.env, timeout=30, capture_output=True, check=False)
