"""Multi-node jobs for real on the multi-node dev Slurm, built by guarded-sbatch's templates from one command:
torchrun and `accelerate launch` on 2 nodes x 1 process (gloo, CPU) train the tiny DDP model, one worker in
each node's namespace; the sidecar runs on a service node (site config) and judges the TensorBoard files the
training node writes, through the shared file system; the checkpoint signal before the time limit requeues the
2-node job, which resumes from its checkpoint on 2 nodes again."""

from __future__ import annotations

import importlib.util
import re
import subprocess
from pathlib import Path

import pytest

from conftest import require
from e2e_helpers import submitted_job_id, wait_for
from guarded_sbatch.scheduler.interface import JobState
from guarded_sbatch.scheduler.slurm import SlurmScheduler
from multinode_helpers import (
    CONFIG, TWO_NODES, Layout, ddp_project, multinode_layout, release, requeued, sacct_runs, trainers_on, unique_name,
)

pytestmark = [pytest.mark.slurm, pytest.mark.multinode]


@pytest.fixture
def layout(slurm_cluster: None) -> Layout:
    require(importlib.util.find_spec("torch") is not None, "torch not installed (scripts/test installs the torch extra)")
    return multinode_layout()


def each_node_trains(layout: Layout, root: Path) -> dict[str, list[tuple[int, str]]] | None:
    running = trainers_on(layout.compute, root)
    return running if len(running) == 2 else None


def test_torchrun_on_two_nodes_trains_and_the_sidecar_judges_it_from_a_service_node(layout: Layout, tmp_path: Path) -> None:
    project = ddp_project(tmp_path)
    slurm = SlurmScheduler(state_dir=tmp_path / "cache")
    result = project.cli("--guard-backend", "slurm", *TWO_NODES, "--time", "00:10:00", "--job-name", unique_name(),
                         "torchrun", "--nproc-per-node", "1", "train.py", "--config", CONFIG, "--steps", "300",
                         "--step-seconds", "0.05")
    assert result.returncode == 0, result.stderr
    assert "2 node(s) × 1 process(es) per node (torchrun)" in result.stderr
    job_id = submitted_job_id(result.stdout)
    sidecar_id = project.run_record(job_id)["sidecar_id"]
    # one worker in each compute node's namespace, seen by pid there (not only in Slurm's view)
    running = wait_for(lambda: each_node_trains(layout, project.root), 120, 0.5, "a trainer on each of 2 nodes")
    assert len(running) == 2
    assert wait_for(lambda: slurm.state(job_id).is_terminal, 180, 1, "the 2-node job to end")
    info = slurm.info(job_id)
    assert info.state is JobState.COMPLETED and info.exit_code == 0, info
    output = (project.root / f"slurm-{job_id}.out").read_text(errors="replace")
    assert "'world_size': 2" in output and "training finished after 300 steps" in output
    assert wait_for(lambda: slurm.state(sidecar_id).is_terminal, 90, 1, "the sidecar to end")
    sidecar_node = sacct_runs(sidecar_id)[0]["nodes"]
    assert sidecar_node in layout.service and sidecar_node not in running  # placed away from the training
    report = project.sidecar_output(job_id)
    assert "Data source: tensorboard_ok" in report and "Decision: CONTINUE" in report
    assert "Decision: STOP" not in report and report.count(f"ended {JobState.COMPLETED.value}") == 1
    # the event file was written on a training node (its name carries the writer's host) and read from the service node
    writers = set(re.findall(r"events\.out\.tfevents\.\d+\.([\w-]+)\.\d+", report))
    assert writers and writers <= set(running), (writers, running)


def test_accelerate_launch_on_two_nodes_trains_as_one_world(layout: Layout, tmp_path: Path) -> None:
    project = ddp_project(tmp_path)
    slurm = SlurmScheduler(state_dir=tmp_path / "cache")
    result = project.cli("--guard-backend", "slurm", *TWO_NODES, "--time", "00:10:00", "--job-name", unique_name("accel"),
                         "accelerate", "launch", "--num_processes", "2", "train.py", "--config", CONFIG,
                         "--steps", "200", "--step-seconds", "0.05")
    assert result.returncode == 0, result.stderr
    job_id = submitted_job_id(result.stdout)
    wait_for(lambda: each_node_trains(layout, project.root), 120, 0.5, "an accelerate worker on each of 2 nodes")
    assert wait_for(lambda: slurm.state(job_id).is_terminal, 180, 1, "the 2-node accelerate job to end")
    info = slurm.info(job_id)
    output = (project.root / f"slurm-{job_id}.out").read_text(errors="replace")
    assert info.state is JobState.COMPLETED and info.exit_code == 0, output[-3000:]
    # one world of two ranks, not two single-process runs side by side (each would print world_size 1)
    assert "'world_size': 2" in output and "'world_size': 1" not in output
    assert output.count("training finished after 200 steps") == 1


@pytest.mark.long  # a run that checkpoints, is requeued and resumes: minutes of waiting on Slurm
def test_two_node_job_checkpoints_on_its_signal_requeues_and_resumes(layout: Layout, tmp_path: Path) -> None:
    project = ddp_project(tmp_path)
    slurm = SlurmScheduler(state_dir=tmp_path / "cache")
    # The signal the template asks for before the time limit (--signal=B:USR1@margin) is sent here by hand once both
    # nodes train: slurmctld's own time (limits checked every 30 s) raced torchrun's start on 2 nodes (5-45 s), and a
    # USR1 that came before the workers were up requeued a run with nothing to resume. The time limit itself is
    # test_launcher_slurm's (one node, where the start is quick).
    result = project.cli("--guard-backend", "slurm", "--guard-max-requeues", "1", *TWO_NODES, "--time", "10",
                         "--job-name", unique_name("requeue"), "torchrun", "--nproc-per-node", "1", "train.py",
                         "--config", CONFIG, "--steps", "700", "--step-seconds", "0.1")
    assert result.returncode == 0, result.stderr
    job_id = submitted_job_id(result.stdout)
    sidecar_id = project.run_record(job_id)["sidecar_id"]
    output_file = project.root / f"slurm-{job_id}.out"
    assert wait_for(lambda: "'step': 100," in output_file.read_text(errors="replace") if output_file.exists() else False,
                       150, 0.5, "the 2-node run to reach step 100")
    subprocess.run(["scancel", "--batch", "--signal=USR1", job_id], check=True, capture_output=True, timeout=30)

    assert wait_for(lambda: requeued(job_id), 150, 1, "the 2-node job to requeue itself")
    assert slurm.state(sidecar_id) is JobState.RUNNING  # the sidecar keeps watching the pending job
    release(job_id)
    resumed = wait_for(lambda: each_node_trains(layout, project.root), 120, 0.5, "the resumed run on 2 nodes")
    assert len(resumed) == 2
    assert wait_for(lambda: slurm.state(job_id).is_terminal, 240, 1, "the requeued run to end")
    info = slurm.info(job_id)
    output = (project.root / f"slurm-{job_id}.out").read_text(errors="replace")
    assert info.state is JobState.COMPLETED and info.exit_code == 0, output[-3000:]
    saved = re.search(r"checkpointed at step (\d+) on SIGUSR1", output)
    assert saved, output[-3000:]
    assert f"requeueing job {job_id} (restart 1 of 1)" in output
    assert f"resumed from step {saved.group(1)}" in output and "training finished after 700 steps" in output
    runs = sacct_runs(job_id)
    assert [run["state"] for run in runs][-1] == "COMPLETED" and len(runs) == 2, runs
    assert all(run["nodes"].count("[") or "," in run["nodes"] for run in runs), runs  # each run held 2 nodes
    assert wait_for(lambda: slurm.state(sidecar_id).is_terminal, 90, 1, "the sidecar to end")
    report = project.sidecar_output(job_id)
    assert "Decision: STOP" not in report and "FINAL_SUMMARY" not in report
    assert report.count("ended COMPLETED") == 1 and "ended PENDING" not in report
