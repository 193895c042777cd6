"""Shared set-up for the tests on the multi-node dev Slurm (scripts/dev-slurm up): the cluster's layout, the
tiny DDP project, the processes in a node (each node is a network namespace named like the node), and the
dev-slurm commands that fail a node and bring it back."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from conftest import require
from e2e_helpers import Project, wait_for

REPO = Path(__file__).resolve().parents[1]
DEV_SLURM = REPO / "scripts" / "dev-slurm"
CONFIG = "configs/synthetic-regression-linear-ddp.yaml"
SITE_CONFIG = REPO / "site_configs" / "dev-multinode.toml"
# per node: one CPU and a little memory for the one trainer process there
TWO_NODES = ["--nodes", "2", "--ntasks-per-node", "1", "--cpus-per-task", "1", "--mem", "1G", "-p", "compute"]


@dataclass(frozen=True)
class Layout:
    compute: tuple[str, ...]  # where training goes
    service: tuple[str, ...]  # where the site config puts sidecars and monitors


def multinode_layout() -> Layout:
    """The dev cluster's nodes by partition; a cluster without two compute and two service nodes, each in its own
    network namespace, fails the test under CI=true (scripts/test brings the multi-node cluster up) and skips it
    elsewhere."""
    out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %P"], capture_output=True, text=True, timeout=30)
    parts: dict[str, list[str]] = {}
    for line in out.stdout.splitlines():
        node, _, partition = line.partition(" ")
        parts.setdefault(partition.strip().rstrip("*"), []).append(node.strip())
    layout = Layout(tuple(sorted(set(parts.get("compute", [])))), tuple(sorted(set(parts.get("service", [])))))
    require(len(layout.compute) >= 2 and len(layout.service) >= 2,
            f"not the multi-node dev Slurm (scripts/dev-slurm up): partitions {sorted(parts)}")
    missing = [node for node in (*layout.compute, *layout.service) if not Path("/run/netns", node).exists()]
    require(not missing, f"nodes without a network namespace: {missing}")
    return layout


def ddp_project(tmp_path: Path, *, site_config: Path | None = SITE_CONFIG, fast_interval: float = 2.0) -> Project:
    """examples/ddp_tiny as a user would copy it, in a folder every node sees; sidecars placed by `site_config`."""
    root = tmp_path / "project"
    shutil.copytree(REPO / "examples" / "ddp_tiny", root,
                    ignore=shutil.ignore_patterns("events.out.tfevents.*", "*.pt", "__pycache__"))
    config = tmp_path / "user-config.toml"
    config.write_text(f'[sidecar]\nfast_interval_seconds = {fast_interval}\njob_poll_seconds = 5.0\nevidence_plot = false\n',
                      encoding="utf-8")
    env = {**os.environ, "GUARDED_SBATCH_STATE_DIR": str(tmp_path / "state"), "GUARDED_SBATCH_USER_CONFIG": str(config),
           "PYTHON": sys.executable, "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
    env.pop("GUARDED_SBATCH_SITE_CONFIG", None)
    if site_config is not None:
        env["GUARDED_SBATCH_SITE_CONFIG"] = str(site_config)
    return Project(root, env)


def unique_name(what: str = "ddp") -> str:
    return f"synthetic-regression-tanh-mlp-{what}-{uuid.uuid4().hex[:6]}"  # other tests share the dev Slurm


def scontrol_job(job_id: str) -> dict[str, str]:
    result = subprocess.run(["scontrol", "-o", "show", "job", job_id], capture_output=True, text=True, timeout=30)
    return dict(re.findall(r"(\w+)=(\S*)", result.stdout)) if result.returncode == 0 else {}


def job_nodes(job_id: str) -> list[str]:
    """The hosts of the job's allocation now (scontrol's NodeList, expanded)."""
    nodelist = scontrol_job(job_id).get("NodeList", "")
    if not nodelist or nodelist == "(null)":
        return []
    out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, timeout=30)
    return out.stdout.split()


def sacct_runs(job_id: str) -> list[dict[str, str]]:
    """Every run of the job (sacct's duplicates: one row per requeue), oldest first."""
    out = subprocess.run(["sacct", "-D", "-X", "-n", "-P", "-j", job_id, "-o", "JobID,State,NodeList"],
                         capture_output=True, text=True, timeout=30)
    return [dict(zip(("job", "state", "nodes"), line.split("|"))) for line in out.stdout.splitlines() if line.count("|") == 2]


def node_processes(node: str, needle: str) -> list[tuple[int, str]]:
    """(pid, command line) of each process in the node's network namespace whose command line or working folder
    holds `needle` (a run's processes all work in its project folder)."""
    out = subprocess.run(["ip", "netns", "pids", node], capture_output=True, text=True, timeout=30)
    found = []
    for pid in out.stdout.split():
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue  # ended meanwhile
        if needle in cmdline or needle in cwd:
            found.append((int(pid), cmdline))
    return found


def trainers_on(nodes: tuple[str, ...] | list[str], root: Path) -> dict[str, list[tuple[int, str]]]:
    """The nodes that still run a training process of the run in `root` (srun, torchrun or accelerate, the
    workers: each names train.py), with those processes."""
    found = {node: [p for p in node_processes(node, str(root)) if "train.py" in p[1]] for node in nodes}
    return {node: procs for node, procs in found.items() if procs}


def dev_slurm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(DEV_SLURM), *args], capture_output=True, text=True, timeout=180)


def requeued(job_id: str, restarts: int = 1) -> bool:
    """The job is back in the queue after its `restarts`-th requeue."""
    job = scontrol_job(job_id)
    return job.get("Restarts") == str(restarts) and job.get("JobState") in ("PENDING", "REQUEUED")


def release(job_id: str, within_s: float = 60) -> None:
    """Slurm holds a requeued batch job for ~2 minutes (EligibleTime); start it now so the test stays short. The
    update can be refused or undone while the requeue is still being completed, so it is made again until the job
    runs or is due to start within seconds (a release that silently failed cost a test its 2 minutes)."""

    def released() -> bool:
        job = scontrol_job(job_id)
        state = job.get("JobState", "")
        if state in ("RUNNING", "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL"):
            return True  # started (or over already): nothing to release
        if state not in ("PENDING", "REQUEUED"):
            return False  # the requeue is still being completed
        start = job.get("StartTime", "")
        if start[:4].isdigit() and datetime.fromisoformat(start).timestamp() <= time.time() + 10:
            return True
        subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now+2"], capture_output=True, timeout=30)
        return False

    wait_for(released, within_s, 1, f"the requeued job {job_id} to be released")
