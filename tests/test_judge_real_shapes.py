"""Issue 37's shapes with real trainers, launched the everyday way (`guarded-sbatch train.sh`) on the local backend at
the DEFAULT cadence (no [sidecar] intervals in the user config):

- a real Lightning run whose only record is its progress bar (one line redrawn with carriage returns) shows
  `train/loss=nan` and goes on running, slowly: the next point is long in coming. It is stopped within 30 s of the
  NaN being written (time is evidence while the job runs; the bar is read as it is drawn);
- a real language model whose loss starts far above ln(vocab_size) (44 to 19 with a vocabulary of 1 024, from its
  first logged point): nothing earlier to compare with, but its config says what guessing would cost; the launch
  records the chance level and the run is stopped.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import shutil
import sys
import uuid
from pathlib import Path

import pytest

from conftest import require
from e2e_helpers import Project, submitted_job_id, wait_for
from guarded_sbatch.scheduler.interface import JobState
from guarded_sbatch.scheduler.local import LocalScheduler

pytestmark = [pytest.mark.frameworks, pytest.mark.waits]
SHAPES = Path(__file__).resolve().parent / "data" / "real_shapes"


def _project(tmp_path: Path, script: str, command: str, config: str | None = None) -> Project:
    root = tmp_path / "project"
    root.mkdir()
    shutil.copy(SHAPES / script, root / script)
    name = f"{Path(script).stem.replace('_', '-')}-t{uuid.uuid4().hex[:6]}"
    (root / "train.sh").write_text(
        f"#!/bin/bash\n#SBATCH --job-name={name}\n#SBATCH --ntasks=1\n#SBATCH --cpus-per-task=1\n#SBATCH --mem=2G\n"
        f"#SBATCH --time=00:10:00\nset -euo pipefail\ncd \"${{SLURM_SUBMIT_DIR:-.}}\"\n{command}\n", encoding="utf-8")
    if config is not None:
        (root / "configs").mkdir()
        (root / "configs" / "lm.yaml").write_text(config, encoding="utf-8")
    user = tmp_path / "user-config.toml"
    user.write_text('[sidecar]\nmem = "1G"\n', encoding="utf-8")  # the default cadence: no intervals set here
    env = {**os.environ, "GUARDED_SBATCH_STATE_DIR": str(tmp_path / "state"), "GUARDED_SBATCH_USER_CONFIG": str(user),
           "GUARDED_SBATCH_BACKEND": "local", "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
    env.pop("GUARDED_SBATCH_SITE_CONFIG", None)
    return Project(root, env, name)


def _launch(project: Project) -> tuple[str, dict, LocalScheduler]:
    result = project.cli("train.sh", timeout=180)
    assert result.returncode == 0, result.stderr
    job_id = submitted_job_id(result.stdout)
    scheduler = LocalScheduler(project.state_dir / "local-jobs")
    return job_id, project.run_record(job_id), scheduler


def _stopped(project: Project, job_id: str, record: dict, scheduler: LocalScheduler, timeout: float) -> dict:
    wait_for(lambda: scheduler.state(job_id).is_terminal, timeout, 1, "the training job to end")
    wait_for(lambda: scheduler.state(record["sidecar_id"]).is_terminal, 90, 1, "its sidecar to end")
    output = project.sidecar_output(job_id)
    assert scheduler.state(job_id) is JobState.CANCELLED and "- Decision: STOP" in output, output[-3000:]
    evidence = project.state_dir / "runs" / record["run_id"] / "evidence" / "evidence.json"
    return json.loads(evidence.read_text())["verdict"]


def _stop_requested_at(project: Project, record: dict) -> float:
    for path in (project.state_dir / "runs" / record["run_id"]).glob("*.json"):
        state = json.loads(path.read_text())
        if isinstance(state, dict) and state.get("stop_requested_at"):
            return float(state["stop_requested_at"])
    raise AssertionError("no sidecar state with stop_requested_at")


def test_a_lightning_bar_showing_nan_while_the_job_runs_on_is_stopped_within_30_s(tmp_path: Path) -> None:
    require(importlib.util.find_spec("lightning") is not None, "lightning not installed")
    project = _project(tmp_path, "lightning_bar_nan.py", "python lightning_bar_nan.py --nan-at 40 --slow-seconds 20")
    job_id, record, scheduler = _launch(project)
    verdict = _stopped(project, job_id, record, scheduler, timeout=240)
    assert verdict["reason"] == "non_finite_loss" and "train/loss" in json.dumps(verdict), verdict
    written = float((project.root / "nan_written_at").read_text())
    delay = _stop_requested_at(project, record) - written
    print(f"\nNaN written -> STOP requested: {delay:.1f} s at the default cadence ({verdict['message']})")
    assert delay <= 30, (delay, verdict["message"])


def test_a_language_model_far_above_its_chance_level_from_its_first_point_is_stopped(tmp_path: Path) -> None:
    config = "vocab_size: 1024\nn_embd: 32\ninit_scale: 25\nlr: 2.0\nmax_steps: 400\nstep_seconds: 0.2\n"
    project = _project(tmp_path, "tiny_lm_diverged.py", "python tiny_lm_diverged.py --config configs/lm.yaml", config)
    job_id, record, scheduler = _launch(project)
    assert record["judge"]["chance_loss"] == pytest.approx(math.log(1024), abs=1e-5)  # from the run's config
    verdict = _stopped(project, job_id, record, scheduler, timeout=240)
    assert verdict["reason"] == "divergence" and "far above chance" in verdict["message"], verdict
    assert verdict["last_step"] < 200, verdict  # stopped early, not at the run's end
