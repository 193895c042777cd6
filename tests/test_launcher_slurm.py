"""Jobs built from one launcher command on the real dev Slurm: a two-process torchrun (gloo, CPU) job trains
and completes, and what is submitted is byte for byte what --guard-print-script shows; a job with a short
time limit gets USR1, checkpoints, requeues itself once, resumes and finishes, while its sidecar follows it
across the requeue without a STOP."""

from __future__ import annotations

import importlib.util

import os
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from conftest import require

from e2e_helpers import Project, submitted_job_id, wait_for
from multinode_helpers import release, requeued
from guarded_sbatch.scheduler.interface import JobState
from guarded_sbatch.scheduler.slurm import SlurmScheduler

pytestmark = pytest.mark.slurm
REPO = Path(__file__).resolve().parents[1]
CONFIG = "configs/synthetic-regression-linear-ddp.yaml"
# one CPU for the job (its two processes share it) and one for the sidecar: the dev node has two
JOB_SHAPE = ["--ntasks", "1", "--cpus-per-task", "1", "--mem", "2G"]


@pytest.fixture
def slurm(slurm_cluster: None, tmp_path: Path) -> SlurmScheduler:
    require(importlib.util.find_spec("torch") is not None, "torch not installed (scripts/test installs the torch extra)")
    return SlurmScheduler(state_dir=tmp_path / "test-slurm-cache")


def ddp_project(tmp_path: Path) -> Project:
    root = tmp_path / "project"
    shutil.copytree(REPO / "examples" / "ddp_tiny", root,
                    ignore=shutil.ignore_patterns("events.out.tfevents.*", "*.pt", "__pycache__"))
    config = tmp_path / "user-config.toml"
    config.write_text('[sidecar]\nfast_interval_seconds = 2.0\njob_poll_seconds = 10.0\nmem = "400M"\nevidence_plot = false\n',
                      encoding="utf-8")
    env = {**os.environ, "GUARDED_SBATCH_STATE_DIR": str(tmp_path / "state"), "GUARDED_SBATCH_USER_CONFIG": str(config),
           "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
    env.pop("GUARDED_SBATCH_SITE_CONFIG", None)
    return Project(root, env)


def unique_name() -> str:
    return f"synthetic-regression-tanh-mlp-ddp-{uuid.uuid4().hex[:6]}"  # other tests share the dev Slurm


def test_two_process_torchrun_job_from_one_command_trains_and_is_submitted_as_printed(
    slurm: SlurmScheduler, tmp_path: Path
) -> None:
    project = ddp_project(tmp_path)
    argv = ["--guard-backend", "slurm", *JOB_SHAPE, "--time", "00:10:00", "--job-name", unique_name(),
            "torchrun", "--nproc-per-node", "2", "train.py", "--config", CONFIG, "--steps", "60"]
    printed = project.cli("--guard-print-script", *argv, check=True).stdout
    result = project.cli(*argv)
    assert result.returncode == 0, result.stderr
    job_id = submitted_job_id(result.stdout)
    stored = subprocess.run(["scontrol", "write", "batch_script", job_id, "-"], capture_output=True, text=True, timeout=30)
    assert stored.returncode == 0, stored.stderr
    assert stored.stdout == printed  # what Slurm runs is exactly what --guard-print-script showed
    # the pre-flight saw the world size the job has: 1 node x 2 processes, global batch 2 x 64
    assert "1 node(s) × 2 process(es) per node (torchrun)" in result.stderr and "global 128" in result.stderr
    record = project.run_record(job_id)
    assert Path(record["script"]).name == "job.sbatch" and Path(record["script"]).read_text() == printed
    assert wait_for(lambda: slurm.state(job_id).is_terminal, 180, 1, "torchrun job to end")
    info = slurm.info(job_id)
    assert info.state is JobState.COMPLETED and info.exit_code == 0, info
    output = (project.root / f"slurm-{job_id}.out").read_text()
    assert "training finished after 60 steps" in output and "'world_size': 2" in output
    assert (project.root / "checkpoints" / "synthetic-regression-linear-ddp" / "checkpoint.pt").is_file()


@pytest.mark.serial  # a run under a 2-minute limit whose requeued half must finish in time: alone on the side cluster
def test_short_time_limit_checkpoints_requeues_once_and_the_sidecar_follows(
    slurm: SlurmScheduler, tmp_path: Path
) -> None:
    project = ddp_project(tmp_path)
    # USR1 60 s before a 2-minute limit: slurmctld checks limits every 30 s, so it comes 30-60 s in, while the
    # ~75 s of training run; the requeued run resumes and finishes before its own limit.
    result = project.cli("--guard-backend", "slurm", "--guard-signal-margin", "60", "--guard-max-requeues", "1",
                         "--guard-waive", "eta=the run spans two allocations by design", *JOB_SHAPE, "--time", "2",
                         "--job-name", unique_name(), "torchrun", "--nproc-per-node", "2", "train.py",
                         "--config", CONFIG, "--steps", "700", "--step-seconds", "0.1")
    assert result.returncode == 0, result.stderr
    job_id = submitted_job_id(result.stdout)
    sidecar_id = project.run_record(job_id)["sidecar_id"]
    output_file = project.root / f"slurm-{job_id}.out"

    assert wait_for(lambda: requeued(job_id), 150, 1, "the job to requeue itself")
    assert slurm.state(sidecar_id) is JobState.RUNNING  # the sidecar keeps watching the pending job
    release(job_id)
    assert wait_for(lambda: slurm.state(job_id).is_terminal, 200, 1, "the requeued run to end")
    info = slurm.info(job_id)
    assert info.state is JobState.COMPLETED and info.exit_code == 0, info
    output = output_file.read_text(errors="replace")
    saved = re.search(r"checkpointed at step (\d+) on SIGUSR1", output)
    assert saved, output[-3000:]
    assert f"requeueing job {job_id} (restart 1 of 1)" in output
    assert f"resumed from step {saved.group(1)}" in output
    assert "training finished after 700 steps" in output
    assert wait_for(lambda: slurm.state(sidecar_id).is_terminal, 90, 1, "the sidecar to end")
    sidecar = slurm.info(sidecar_id)
    assert sidecar.state is JobState.COMPLETED
    assert info.end_time is not None and sidecar.end_time is not None and sidecar.end_time >= info.end_time
    report = project.sidecar_output(job_id)
    assert "Decision: STOP" not in report and "FINAL_SUMMARY" not in report
    assert report.count("ended COMPLETED") == 1 and "ended PENDING" not in report and "ended REQUEUED" not in report
