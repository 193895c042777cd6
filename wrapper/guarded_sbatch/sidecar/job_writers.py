"""What the sidecar learns, while the job runs, of who writes the run's files: the job's processes on this
host (the local backend's process group; on Slurm the processes whose environment carries the job's
SLURM_JOB_ID) and the processes of other jobs beside it (other local jobs' process groups; on Slurm the
processes carrying another SLURM_JOB_ID).
A TensorBoard event file names its writer's host and pid, so a file of another run in the same folder is
told apart (sources/writers.py decides).

Only the user's own processes are looked at (another user's /proc/<pid>/environ is not readable anyway),
the scan is bounded, and its answer is kept a second: a shared monitor asks once per run per poll.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

_MAX_PROCESSES = 20_000
_CACHE_S = 1.0  # one shared-monitor poll of many runs scans once; a new process is seen a second later


@dataclass(frozen=True)
class _Process:
    pid: int
    pgid: int
    slurm_job: str
    node: str = ""  # SLURMD_NODENAME: the node a job's process runs on (its event files carry that host)


_cache: tuple[float, list[_Process]] = (0.0, [])


def _own_processes(now: float) -> list[_Process]:
    global _cache
    if now - _cache[0] < _CACHE_S:
        return _cache[1]
    uid = os.geteuid()
    found: list[_Process] = []
    try:
        names = [n for n in os.listdir("/proc") if n.isdigit()][:_MAX_PROCESSES]
    except OSError:
        names = []
    for name in names:
        base = f"/proc/{name}"
        try:
            if os.stat(base).st_uid != uid:
                continue
            with open(f"{base}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[-1].split()
            pgid = int(fields[2])
            job = node = ""
            with open(f"{base}/environ", "rb") as handle:
                for item in handle.read(256 * 1024).split(b"\0"):
                    if item.startswith(b"SLURM_JOB_ID="):
                        job = item[len(b"SLURM_JOB_ID="):].decode("ascii", "replace")
                    elif item.startswith(b"SLURMD_NODENAME="):
                        node = item[len(b"SLURMD_NODENAME="):].decode("ascii", "replace")
        except (OSError, ValueError, IndexError):
            continue
        found.append(_Process(int(name), pgid, job, node))
    _cache = (now, found)
    return found


def job_processes(job_id: str, *, backend: str, pgid: int | None, other_groups: frozenset[int] = frozenset(),
                  now: float | None = None) -> tuple[set[int], set[int], set[str], set[str]]:
    """(the job's processes on this host, other jobs' processes on this host, the nodes the job's processes
    run on, the nodes of every job process in this host's process table: several Slurm nodes can share one
    table, as the dev cluster's namespaces do, and a pid is comparable only with files those nodes wrote)."""
    processes = _own_processes(time.time() if now is None else now)
    if backend == "local":
        # a local job is its process group, and so is each other live local job (`other_groups`): a neighbour
        # writing the same folder is told apart before this job writes there. Not by SLURM_JOB_ID: local ids
        # repeat across state folders, and a tmux server hands its first client's variables to later sessions.
        if pgid is None:
            return set(), set(), set(), set()
        own = {p.pid for p in processes if p.pgid == pgid}
        return own, {p.pid for p in processes if p.pgid in other_groups and p.pgid != pgid}, set(), set()
    mine = [p for p in processes if p.slurm_job == job_id]
    foreign = {p.pid for p in processes if p.slurm_job and p.slurm_job != job_id}
    return {p.pid for p in mine}, foreign, {p.node for p in mine if p.node}, {p.node for p in processes if p.node}
