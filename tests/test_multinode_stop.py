"""STOP on a multi-node job ends every step on every node: a 2-node torchrun job whose weights turn NaN is
stopped by its sidecar (on a service node), and afterwards no process of the run is left in any node's
namespace: not the torchrun agents, not the workers, not the srun that started them. Looked at by pid in each
node, not only in Slurm's view of the job."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from conftest import require
from e2e_helpers import submitted_job_id, wait_for
from guarded_sbatch.scheduler.interface import JobState
from guarded_sbatch.scheduler.slurm import SlurmScheduler
from multinode_helpers import CONFIG, TWO_NODES, Layout, ddp_project, multinode_layout, trainers_on, unique_name

pytestmark = [pytest.mark.slurm, pytest.mark.multinode]


@pytest.fixture
def layout(slurm_cluster: None) -> Layout:
    require(importlib.util.find_spec("torch") is not None, "torch not installed (scripts/test installs the torch extra)")
    return multinode_layout()


def test_stop_on_nan_ends_every_process_of_the_run_on_every_node(layout: Layout, tmp_path: Path) -> None:
    project = ddp_project(tmp_path)
    slurm = SlurmScheduler(state_dir=tmp_path / "cache")
    result = project.cli("--guard-backend", "slurm", "--guard-waive", "eta=stopped on purpose", *TWO_NODES,
                         "--time", "00:10:00", "--job-name", unique_name("nan"), "torchrun", "--nproc-per-node", "1",
                         "train.py", "--config", CONFIG, "--steps", "3000", "--step-seconds", "0.1", "--nan-at", "60")
    assert result.returncode == 0, result.stderr
    job_id = submitted_job_id(result.stdout)
    all_nodes = (*layout.compute, *layout.service)
    training = wait_for(lambda: len(running := trainers_on(all_nodes, project.root)) == 2 and running, 120, 0.5,
                        "a trainer on each of 2 nodes")
    # each node holds a torchrun agent and its worker (and the batch node the srun that started them)
    assert all(sum("torchrun" in cmd for _, cmd in procs) >= 1 for procs in training.values()), training
    assert wait_for(lambda: slurm.state(job_id).is_terminal, 150, 1, "the sidecar to stop the job")
    assert slurm.info(job_id).state is JobState.CANCELLED
    report = wait_for(lambda: "FINAL_SUMMARY" in (text := project.sidecar_output(job_id)) and text, 60, 0.5,
                      "the sidecar's FINAL_SUMMARY")
    assert "Decision: STOP" in report
    assert "nan" in report.lower()
    left = trainers_on(all_nodes, project.root)
    if left:  # Slurm's step teardown on the other node may lag its report by a moment: bounded, then fail
        wait_for(lambda: not trainers_on(all_nodes, project.root), 30, 0.2, f"every process of the run to end (left: {left})")
    output = (project.root / f"slurm-{job_id}.out").read_text(errors="replace")
    assert "nan injected at step 60" in output and "training finished" not in output
