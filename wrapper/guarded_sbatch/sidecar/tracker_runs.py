"""Several tracker runs one after another inside one job — a W&B sweep agent (`wandb agent SWEEP` in an sbatch job,
or a loop of `wandb.init()` ... `finish()`): each W&B run is judged as its own run, with its own history and
verdict, and the report names it (its entity/project/run id). Of a job's W&B runs the newest one with data is
judged (a later one supersedes the earlier, never merged with it); one a STOP ended is retired.

What a STOP does there: when the judged W&B run is written by a process the agent started for it (a process of
the job whose environment carries WANDB_SWEEP_ID, as `wandb agent` gives each run's process), only that process
and its children are stopped (SIGTERM, then SIGKILL after the grace period): the agent goes on with its next run,
and the watch goes on with it; that run's evidence is kept in `evidence/<W&B run>/` (sidecar/agent_stop.py).
Otherwise (one process running every W&B run) the job is stopped as any run is.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from guarded_sbatch.core import door

if TYPE_CHECKING:
    from guarded_sbatch.judge.history import MetricHistory
    from guarded_sbatch.sources.base import MetricSource

SWEEP_VARIABLE = b"WANDB_SWEEP_ID="


def judged_source(with_data: Sequence[MetricSource], retired: set[int], successive: set[int]) -> MetricSource | None:
    """Of the sources with data (in priority order, opened order within a kind), the one judged: the first, except
    that of the W&B runs the job's processes were seen writing (`successive`: a sweep agent's runs follow one
    another) the newest not retired is."""
    live = [source for source in with_data if id(source) not in retired]
    if not live:
        return None
    later = [source for source in live if source.kind == "wandb" and id(source) in successive]
    return later[-1] if live[0].kind == "wandb" and later else live[0]


def has_points(history: MetricHistory | None) -> bool:
    return history is not None and bool(len(history))


def _parent(pid: int) -> int | None:
    try:
        return int(door.read_proc(f"/proc/{pid}/stat").rsplit(b")", 1)[-1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _in_sweep(pid: int) -> bool:
    try:
        return any(item.startswith(SWEEP_VARIABLE) for item in door.read_proc(f"/proc/{pid}/environ", 256 * 1024).split(b"\0"))
    except OSError:
        return False


def agent_run_process(holder: int, job_pids: Sequence[int]) -> int | None:
    """The process an agent started for one W&B run: the top-most process of the job, from the one holding the run's
    log (its tracker service) up, whose environment carries WANDB_SWEEP_ID; None when there is none."""
    own = set(job_pids)
    found = None
    pid: int | None = holder
    for _ in range(64):  # a bounded walk up the job's tree
        if pid is None or pid not in own:
            break
        if _in_sweep(pid):
            found = pid
        pid = _parent(pid)
    return found


def _tree(pid: int) -> set[int]:
    import psutil  # noqa: PLC0415  the sidecar's, never the login node's

    try:
        root = psutil.Process(pid)
        return {pid, *(child.pid for child in root.children(recursive=True))}
    except psutil.Error:
        return set()


def stop_process_tree(pid: int, grace_s: float = 30.0, poll_s: float = 0.5) -> tuple[bool, str]:
    """SIGTERM the process and its children, SIGKILL what is left after `grace_s`; (gone, what was done)."""
    members = _tree(pid)
    if not members:
        return True, f"process {pid} had already ended"
    for member in members:
        _signal(member, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not any(_alive(m) for m in members):
            return True, f"process {pid} and its children ended on SIGTERM"
        time.sleep(poll_s)
    for member in members:
        _signal(member, signal.SIGKILL)
    time.sleep(poll_s)
    left = [m for m in members if _alive(m)]
    return not left, f"process {pid} killed after {grace_s:g} s" + (f"; still there: {left}" if left else "")


def _signal(pid: int, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _alive(pid: int) -> bool:
    try:
        return door.read_proc(f"/proc/{pid}/stat").rsplit(b")", 1)[-1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False

