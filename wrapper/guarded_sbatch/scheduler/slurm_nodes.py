"""Runs of a Slurm job that ended because a node died (NODE_FAIL), and which of its nodes are down now.

A node that stops answering is marked DOWN by slurmctld after SlurmdTimeout; its jobs end NODE_FAIL, or, when
they may be requeued, go back to the queue under the same id. squeue then shows only the new run (PENDING);
sacct's duplicates (`-D`) keep the run that ended NODE_FAIL. Needs accounting; without it no loss is found.
"""

from __future__ import annotations

from guarded_sbatch.scheduler.interface import NodeLoss
from guarded_sbatch.scheduler.slurm_parse import parse_timestamp
from guarded_sbatch.scheduler.slurm_run import run_slurm


def node_losses(job_id: str, timeout: float) -> list[NodeLoss]:
    """Every run of the job that ended NODE_FAIL, oldest first; [] when there is none or sacct cannot tell."""
    result = run_slurm(["sacct", "-D", "-X", "-n", "-P", "-j", job_id, "-o", "JobID,State,NodeList,End"],
                       timeout=timeout)
    if result.returncode != 0:
        return []
    rows = [line.split("|") for line in result.stdout.splitlines() if line.count("|") == 3]
    runs = [row for row in rows if row[0] == job_id]
    losses = []
    for number, (_, state, nodes, end) in enumerate(runs, start=1):
        if state.split()[0] not in ("NODE_FAIL", "BOOT_FAIL"):
            continue
        losses.append(NodeLoss(run=number, nodes=nodes, ended_at=parse_timestamp(end), down=_down_nodes(nodes, timeout)))
    return losses


def _down_nodes(nodes: str, timeout: float) -> tuple[str, ...]:
    result = run_slurm(["sinfo", "-h", "-N", "-n", nodes, "-t", "down,drain,fail,no_respond", "-o", "%N|%E"],
                       timeout=timeout)
    if result.returncode != 0:
        return ()
    seen: dict[str, str] = {}
    for line in result.stdout.splitlines():
        name, _, reason = line.partition("|")
        if name.strip():
            seen.setdefault(name.strip(), reason.strip() or "no reason given")
    return tuple(f"{name} ({reason})" for name, reason in seen.items())
