"""What the sidecar learns, while the job runs, of who writes the run's files: the job's process tree on this
host (the local backend's process group; on Slurm the processes whose environment carries the job's
SLURM_JOB_ID; with every descendant of either, such as a tracker's service process that left the group) and
the processes of other jobs beside it (other local jobs' process groups; on Slurm the processes carrying
another SLURM_JOB_ID), and the files the job's processes hold open for writing (`held_files`, read with psutil):
those are the run's own wherever they lie, whatever key named them.
A TensorBoard event file names its writer's host and pid, so a file of another run in the same folder is
told apart (sources/writers.py decides).

Only the user's own processes are looked at (another user's /proc/<pid>/environ is not readable anyway),
the scan is bounded, and its answer is kept a second: a shared monitor asks once per run per poll.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from guarded_sbatch.core import door

_MAX_PROCESSES = 20_000
_MAX_HELD_PROCESSES = 256  # processes of one job whose open files are listed at one poll
_MAX_HELD_FILES = 4096
HELD_EVERY_S = 10.0  # a watcher lists a job's open files when its processes change, else at most this often
_CACHE_S = 1.0  # one shared-monitor poll of many runs scans once; a new process is seen a second later


@dataclass(frozen=True)
class _Process:
    pid: int
    pgid: int
    ppid: int
    slurm_job: str  # SLURM_JOB_ID, or "<array job>_<task>" for an array task
    node: str = ""  # SLURMD_NODENAME: the node a job's process runs on (its event files carry that host)
    cluster: str = ""  # SLURM_CLUSTER_NAME: job ids are a cluster's own ("local" for the local backend's jobs)


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
            fields = door.read_proc(f"{base}/stat").rsplit(b")", 1)[-1].split()
            ppid, pgid = int(fields[1]), int(fields[2])
            job, node, cluster = _job_of(door.read_proc(f"{base}/environ", 256 * 1024))
        except (OSError, ValueError, IndexError):
            continue
        found.append(_Process(int(name), pgid, ppid, job, node, cluster))
    _cache = (now, found)
    return found


_ENV_KEYS = (b"SLURM_JOB_ID", b"SLURMD_NODENAME", b"SLURM_ARRAY_JOB_ID", b"SLURM_ARRAY_TASK_ID", b"SLURM_CLUSTER_NAME")


def _job_of(environ: bytes) -> tuple[str, str, str]:
    """(the job a process belongs to, its node, its cluster) from its environment: an array task's processes are
    the task's "<array job>_<task>" (SLURM_ARRAY_JOB_ID, SLURM_ARRAY_TASK_ID), as the guard names the task's run;
    any other job's, SLURM_JOB_ID."""
    values: dict[bytes, str] = {}
    for item in environ.split(b"\0"):
        key, _, value = item.partition(b"=")
        if key in _ENV_KEYS:
            values[key] = value.decode("ascii", "replace")
    array, task = values.get(b"SLURM_ARRAY_JOB_ID", ""), values.get(b"SLURM_ARRAY_TASK_ID", "")
    job = f"{array}_{task}" if array and task else values.get(b"SLURM_JOB_ID", "")
    return job, values.get(b"SLURMD_NODENAME", ""), values.get(b"SLURM_CLUSTER_NAME", "")


def _same_cluster(process: _Process, cluster: str) -> bool:
    """Job ids repeat across clusters (and the local backend's across state folders): a process whose job id
    matches is the job's only when it runs under the same cluster, where both are known."""
    return not cluster or not process.cluster or process.cluster == cluster


def job_processes(job_id: str, *, process_groups: bool, pgid: int | None, other_groups: frozenset[int] = frozenset(),
                  now: float | None = None) -> tuple[set[int], set[int], set[str], set[str]]:
    """(the job's processes on this host, other jobs' processes on this host, the nodes the job's processes
    run on, the nodes of every job process in this host's process table: several Slurm nodes can share one
    table, as the dev cluster's namespaces do, and a pid is comparable only with files those nodes wrote)."""
    processes = _own_processes(time.time() if now is None else now)
    if process_groups:  # the backend runs each job as a process group here (scheduler.process_groups_here)
        # a local job is its process group, and so is each other live local job (`other_groups`): a neighbour
        # writing the same folder is told apart before this job writes there. Not by SLURM_JOB_ID: local ids
        # repeat across state folders, and a tmux server hands its first client's variables to later sessions.
        if pgid is None:
            return set(), set(), set(), set()
        own = _with_descendants({p.pid for p in processes if p.pgid == pgid}, processes)
        others = _with_descendants({p.pid for p in processes if p.pgid in other_groups and p.pgid != pgid}, processes)
        return own, others - own, set(), set()
    cluster = os.environ.get("SLURM_CLUSTER_NAME", "")  # the watcher's own: a job of the cluster it watches
    mine = [p for p in processes if p.slurm_job == job_id and _same_cluster(p, cluster)]
    own = _with_descendants({p.pid for p in mine}, processes)
    foreign = _with_descendants({p.pid for p in processes if p.slurm_job and p.pid not in own}, processes) - own
    return own, foreign, {p.node for p in mine if p.node}, {p.node for p in processes if p.node}


def _with_descendants(pids: set[int], processes: list[_Process]) -> set[int]:
    """The processes and all their descendants (a child that started a session of its own is still the job's)."""
    children: dict[int, list[int]] = {}
    for process in processes:
        children.setdefault(process.ppid, []).append(process.pid)
    tree, todo = set(pids), list(pids)
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in tree:
                tree.add(child)
                todo.append(child)
    return tree


def held_files(pids: set[int]) -> dict[str, int]:
    """The regular files the processes hold open for writing (path -> the pid holding it), read with psutil;
    bounded, and silent about processes that ended or cannot be read."""
    import psutil  # noqa: PLC0415  the sidecar's, never the login node's

    held: dict[str, int] = {}
    for pid in sorted(pids)[:_MAX_HELD_PROCESSES]:
        try:
            files = psutil.Process(pid).open_files()
        except (psutil.Error, OSError):
            continue
        for item in files:
            if item.mode != "r" and item.path.startswith("/"):
                held.setdefault(item.path, pid)
            if len(held) >= _MAX_HELD_FILES:
                return held
    return held
