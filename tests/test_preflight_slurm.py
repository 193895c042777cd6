"""The pre-flight against the real dev Slurm: queue-wait estimate (sbatch --test-only) and job-name collisions."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from guarded_sbatch.launch.results import CheckResult, CheckStatus
from guarded_sbatch.scheduler.interface import Scheduler, SubmitRequest

from preflight_tree import TRAIN_SH, Tree, build_clean_tree

pytestmark = pytest.mark.slurm

SMALL_TRAIN_SH = TRAIN_SH.replace("#SBATCH --nodes=2\n", "").replace("#SBATCH --gpus-per-node=4\n", "")


def _queue() -> str:
    return subprocess.run(["squeue", "-h", "-o", "%i %u %T %l %C %m"], capture_output=True, text=True, timeout=30).stdout


def _eta_once_the_node_has_room(tree: Tree, scheduler: Scheduler) -> CheckResult:
    """The ETA check; retried while the shared dev node is full of other tests' jobs that have no time limit, for
    which Slurm can give no start time (the check then warns, as it should)."""
    deadline = time.time() + 90
    while True:
        report = tree.run(["--guard-seconds-per-epoch=60", "train.sh"], scheduler=scheduler)
        eta = next(r for r in report.results if r.name == "eta")
        if eta.status is CheckStatus.PASSED or time.time() > deadline:
            return eta
        time.sleep(3)


def test_eta_uses_sbatch_test_only_and_names_see_the_queue(slurm_cluster: None, tmp_path: Path) -> None:
    from guarded_sbatch.scheduler.slurm import SlurmScheduler

    tree = build_clean_tree(tmp_path)
    tree.write("train.sh", SMALL_TRAIN_SH)
    scheduler = SlurmScheduler()
    eta = _eta_once_the_node_has_room(tree, scheduler)
    assert eta.status is CheckStatus.PASSED, f"{eta.finding}; queue: {_queue()}"
    assert any("(slurm estimate" in line for line in eta.evidence)

    holder = tree.write("hold.sh", "#!/bin/bash\nsleep 60\n")
    job_id = scheduler.submit(SubmitRequest(holder, ("--hold", "--job-name=coco-resnet50-bs256-lr3e-4"), workdir=tmp_path))
    try:
        deadline = time.time() + 15
        while "coco-resnet50-bs256-lr3e-4" not in scheduler.active_job_names() and time.time() < deadline:
            time.sleep(0.5)
        names = next(r for r in tree.run(scheduler=scheduler).results if r.name == "run-name")
        assert names.status is CheckStatus.FAILED and "queued or running job" in names.finding
        restart = next(r for r in tree.run(scheduler=scheduler, restart=True).results if r.name == "run-name")
        assert restart.status is CheckStatus.PASSED
    finally:
        scheduler.cancel(job_id)
