"""Nodes that die under guarded jobs on the multi-node dev Slurm (`scripts/dev-slurm node-fail NODE`: every
process in the node is killed, as a power cut would; Slurm marks it DOWN after SlurmdTimeout).

- A training node of a 2-node job dies: the run ends NODE_FAIL and the sidecar (on a service node) says a node
  died, naming it, and stops nothing (no training-quality STOP); Slurm requeues the job (--requeue) and the
  sidecar follows its next run, on the nodes left, to the end. A job submitted with --no-requeue ends
  NODE_FAIL: told the same way, once, and the sidecar ends with it.
- The per-user monitor's node dies: Slurm requeues the monitor job onto the other service node, where it
  resumes every run from its state on the shared file system: the STOP it made before is not repeated, the
  STOP still due after is made, once.
These kill nodes of the shared cluster, so they run alone (serial) and bring the node back in any case."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import require
from e2e_helpers import make_project, submitted_job_id, wait_for
from guarded_sbatch.scheduler.interface import JobState
from guarded_sbatch.scheduler.slurm import SlurmScheduler
from multinode_helpers import (
    CONFIG, SITE_CONFIG, Layout, ddp_project, dev_slurm, job_nodes, multinode_layout, release, requeued, sacct_runs,
    scontrol_job, trainers_on, unique_name,
)

pytestmark = [pytest.mark.slurm, pytest.mark.multinode, pytest.mark.serial]


@pytest.fixture
def layout(slurm_cluster: None) -> Layout:
    require(importlib.util.find_spec("torch") is not None, "torch not installed (scripts/test installs the torch extra)")
    return multinode_layout()


@pytest.fixture
def failed_nodes() -> Iterator[list[str]]:
    """Nodes a test failed; each is booted again afterwards, whatever happened (others share the cluster)."""
    nodes: list[str] = []
    yield nodes
    for node in nodes:
        back = dev_slurm("node-up", node)
        assert back.returncode == 0, back.stderr


def test_a_dead_training_node_is_told_as_such_and_the_requeued_job_is_followed(
    layout: Layout, tmp_path: Path, failed_nodes: list[str]
) -> None:
    project = ddp_project(tmp_path)
    slurm = SlurmScheduler(state_dir=tmp_path / "cache")
    # the default partition (compute nodes first): the requeued run finds 2 nodes again without the dead one
    result = project.cli("--guard-backend", "slurm", "--guard-waive", "eta=interrupted on purpose", "--nodes", "2",
                         "--ntasks-per-node", "1", "--cpus-per-task", "1", "--mem", "1G", "--time", "00:10:00",
                         "--job-name", unique_name("nodefail"), "torchrun", "--nproc-per-node", "1", "train.py",
                         "--config", CONFIG, "--steps", "500", "--step-seconds", "0.1")
    assert result.returncode == 0, result.stderr
    job_id = submitted_job_id(result.stdout)
    try:
        sidecar_id = project.run_record(job_id)["sidecar_id"]
        wait_for(lambda: len(trainers_on(layout.compute, project.root)) == 2, 120, 0.5, "a trainer on each of 2 nodes")
        wait_for(lambda: "Decision: CONTINUE" in project.sidecar_output(job_id), 90, 1, "the sidecar to judge the run healthy")
        batch_host = scontrol_job(job_id)["BatchHost"]
        failed_nodes.append(batch_host)
        killed = dev_slurm("node-fail", batch_host)
        assert killed.returncode == 0, killed.stderr

        assert wait_for(lambda: requeued(job_id), 120, 1, "Slurm to requeue the job of the dead node")
        assert sacct_runs(job_id)[0]["state"] == "NODE_FAIL"

        def told() -> str | None:
            lines = [line for line in project.sidecar_output(job_id).splitlines() if "lost a node" in line]
            return lines[0] if lines else None

        line = wait_for(told, 60, 1, "the sidecar to tell the dead node")
        assert f"job {job_id} lost a node: run 1 ended NODE_FAIL" in line and batch_host in line.split("down:")[1]
        assert "a dead node, not the training; nothing is stopped" in line and "follows its next run" in line
        assert slurm.state(sidecar_id) is JobState.RUNNING

        def waiting_row() -> dict | None:
            runs = json.loads(project.cli_here("status", "--json", check=True).stdout)["runs"]
            row = next(r for r in runs if r["job_id"] == job_id)
            return row if row["reason"] == "node_lost" else None

        row = wait_for(waiting_row, 30, 1, "status to say why the requeued job waits")  # the state is saved after the line
        assert row["state"] in ("PENDING", "REQUEUED") and batch_host in row["message"], row
        release(job_id)
        rerun = wait_for(lambda: len(nodes := job_nodes(job_id)) == 2 and slurm.state(job_id) is JobState.RUNNING and nodes,
                         120, 1, "the requeued run to start on 2 nodes")
        assert batch_host not in rerun
        assert wait_for(lambda: slurm.state(job_id).is_terminal, 200, 1, "the requeued run to end")
        assert slurm.info(job_id).state is JobState.COMPLETED
        assert wait_for(lambda: slurm.state(sidecar_id).is_terminal, 90, 1, "the sidecar to end")
        report = project.sidecar_output(job_id)
        assert "Decision: STOP" not in report and "FINAL_SUMMARY" not in report
        assert report.count("lost a node") == 1 and report.count("ended COMPLETED") == 1
    finally:
        subprocess.run(["scancel", job_id], capture_output=True, timeout=30)  # a failed test leaves no job behind


def test_a_job_that_may_not_requeue_ends_node_fail_told_as_a_dead_node(layout: Layout, tmp_path: Path,
                                                                         failed_nodes: list[str]) -> None:
    project = make_project(tmp_path, fast_interval=2.0, job_poll=5.0)
    project.env["GUARDED_SBATCH_SITE_CONFIG"] = str(SITE_CONFIG)
    slurm = SlurmScheduler(state_dir=tmp_path / "cache")
    launched = project.cli("-p", "compute", "--no-requeue", "--job-name", f"{project.name}-noreq", "train.sh",
                           "--steps", "3000", "--step-seconds", "0.05")
    assert launched.returncode == 0, launched.stderr
    job_id = submitted_job_id(launched.stdout)
    try:
        sidecar_id = project.run_record(job_id)["sidecar_id"]
        wait_for(lambda: "Decision: CONTINUE" in project.sidecar_output(job_id), 120, 1, "the sidecar to judge the run healthy")
        (node,) = job_nodes(job_id)
        failed_nodes.append(node)
        assert dev_slurm("node-fail", node).returncode == 0
        assert wait_for(lambda: slurm.state(job_id) is JobState.NODE_FAIL, 120, 1, "the job to end NODE_FAIL")
        assert wait_for(lambda: slurm.state(sidecar_id).is_terminal, 90, 1, "the sidecar to end")
        report = project.sidecar_output(job_id)
        assert "Decision: STOP" not in report and "FINAL_SUMMARY" not in report
        told = [line for line in report.splitlines() if "a dead node, not the training" in line]
        assert len(told) == 1 and "was not requeued" in told[0], report[-2000:]
        assert report.count(f"training job {job_id} ended NODE_FAIL") == 1
    finally:
        subprocess.run(["scancel", job_id], capture_output=True, timeout=30)


STEPS = 3000  # 150 s at 0.05 s per step: the runs outlive the monitor's node
BREAKS = {1: ["--nan-at", "100"], 2: ["--nan-at", "2200"]}  # one STOP before the monitor's node dies, one after


def _monitor_output(state_dir: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in state_dir.glob("shared-monitor/*/monitor-*.out"))


@pytest.mark.long  # runs that outlive the monitor's requeue: minutes, on the cluster of the long tests
def test_the_monitor_requeued_off_its_dead_node_resumes_every_run_with_no_stop_lost_or_repeated(
    layout: Layout, tmp_path: Path, failed_nodes: list[str]
) -> None:
    project = make_project(tmp_path, fast_interval=2.0, job_poll=5.0)
    project.env["GUARDED_SBATCH_SITE_CONFIG"] = str(SITE_CONFIG)  # monitors go to the service partition
    config = Path(project.env["GUARDED_SBATCH_USER_CONFIG"])
    config.write_text(config.read_text() + 'mode = "per-user"\nmonitor_mem = "1G"\n', encoding="utf-8")
    slurm = SlurmScheduler(state_dir=tmp_path / "watcher")
    jobs: dict[int, str] = {}
    monitor = ""

    def report(i: int) -> str:
        run_id = project.run_record(jobs[i])["run_id"]
        return (project.state_dir / "runs" / run_id / "sidecar-monitor.out").read_text(errors="replace")

    try:
        for i in range(3):
            launched = project.cli("-p", "compute", "--job-name", f"synthetic-tanh-mlp-bs64-mnode-r{i}", "train.sh",
                                   "--steps", str(STEPS), "--step-seconds", "0.05", "--logdir", f"runs/r{i}",
                                   *BREAKS.get(i, []))
            assert launched.returncode == 0, launched.stderr
            jobs[i] = submitted_job_id(launched.stdout)
        records = {i: project.run_record(job) for i, job in jobs.items()}
        (monitor,) = {r["monitor_id"] for r in records.values()}
        wait_for(lambda: "mnode-r2 (job" in _monitor_output(project.state_dir), 120, 1, "the monitor to watch every run")
        wait_for(lambda: slurm.state(jobs[1]) is JobState.CANCELLED and "FINAL_SUMMARY" in report(1), 120, 1,
                 "the first STOP, made to the end")
        (monitor_node,) = job_nodes(monitor)
        assert monitor_node in layout.service
        failed_nodes.append(monitor_node)
        assert dev_slurm("node-fail", monitor_node).returncode == 0
        assert wait_for(lambda: requeued(monitor), 120, 1, "Slurm to requeue the monitor of the dead node")
        release(monitor)
        moved = wait_for(lambda: slurm.state(monitor) is JobState.RUNNING and job_nodes(monitor), 120, 1,
                         "the monitor to start again")
        assert moved != [monitor_node] and moved[0] in layout.service
        wait_for(lambda: all(slurm.state(job).is_terminal for job in jobs.values()), 300, 2, "every training job to end")
    finally:
        for job in [*jobs.values(), monitor]:
            if job:
                subprocess.run(["scancel", job], capture_output=True, timeout=30)
    states = {i: slurm.state(job) for i, job in jobs.items()}
    assert states == {0: JobState.COMPLETED, 1: JobState.CANCELLED, 2: JobState.CANCELLED}, states
    assert sacct_runs(monitor)[0]["state"] == "NODE_FAIL"
    for i in jobs:
        text = report(i)
        assert text.count("FINAL_SUMMARY") == (1 if i in BREAKS else 0), text[-2000:]
        assert text.count("- Action:") == (1 if i in BREAKS else 0), text[-2000:]  # one stop each, never again
        if i != 1:  # still live when the monitor came back
            assert "resuming (restart 1)" in text, text[-2000:]
    assert "Decision: STOP" not in report(0)
