"""A run's files found by what its processes write (no trainer, real processes and files): the job's process tree
with its descendants, an array task's processes named J_T, the files the tree holds open (psutil) made specs
wherever they lie, TensorBoard runs picked by the pid in their event files' names, and of a job's several W&B
runs the newest one judged, its agent process found by WANDB_SWEEP_ID."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from guarded_sbatch.sources.run_sources import SourceSpec, WriterIdentity
from guarded_sbatch.sidecar import job_writers
from guarded_sbatch.sidecar.job_writers import held_files, job_processes
from guarded_sbatch.sidecar.tracker_runs import agent_run_process, judged_source
from guarded_sbatch.sources.discovery import HELD_ORIGIN, discover, held_specs


def test_an_array_tasks_processes_are_the_task_and_a_plain_jobs_its_id() -> None:
    task = b"PATH=/bin\0SLURM_JOB_ID=812\0SLURM_ARRAY_JOB_ID=800\0SLURM_ARRAY_TASK_ID=12\0SLURMD_NODENAME=node2\0"
    assert job_writers._job_of(task) == ("800_12", "node2", "")
    assert job_writers._job_of(b"SLURM_JOB_ID=77\0SLURM_CLUSTER_NAME=devmn\0") == ("77", "", "devmn")
    assert job_writers._job_of(b"HOME=/root\0") == ("", "", "")


def test_a_job_of_the_same_id_on_another_cluster_is_not_this_jobs(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Job ids are a cluster's own: a local-backend job (or another cluster's) with the watched job's id, in the same
    process table, is another job (it had been read as this one's, its W&B run cited by a Slurm job's sidecar)."""
    table = [job_writers._Process(10, 10, 1, "11", "node1", "devmn"), job_writers._Process(11, 10, 10, "", ""),
             job_writers._Process(20, 20, 1, "11", "", "local"), job_writers._Process(21, 20, 20, "", "")]
    monkeypatch.setattr(job_writers, "_own_processes", lambda now: table)
    monkeypatch.setenv("SLURM_CLUSTER_NAME", "devmn")
    own, foreign, nodes, _ = job_processes("11", process_groups=False, pgid=None)
    assert (own, foreign, nodes) == ({10, 11}, {20, 21}, {"node1"})
    monkeypatch.delenv("SLURM_CLUSTER_NAME")  # a watcher outside any job (monitor by hand): ids alone
    assert job_processes("11", process_groups=False, pgid=None)[0] == {10, 11, 20, 21}


def test_a_child_that_left_the_jobs_process_group_is_still_the_jobs(tmp_path: Path) -> None:
    """A tracker's service started in a session of its own (setsid) leaves the job's group, not its tree; the file
    it holds open is found."""
    log = tmp_path / "held.wandb"
    child = ("import os, sys, time; f = open(sys.argv[1], 'w'); print('open', flush=True); time.sleep(60)")
    parent = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys, time; subprocess.Popen(sys.argv[1:], start_new_session=True);"
         " time.sleep(60)", sys.executable, "-c", child, str(log)], start_new_session=True, stdout=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        held: dict[str, int] = {}
        while time.monotonic() < deadline and str(log) not in held:
            time.sleep(0.3)
            own, others, _, _ = job_processes("1", process_groups=True, pgid=parent.pid, now=time.time() + 10)
            held = held_files(own)
        assert parent.pid in own and len(own) >= 2, own  # the child in its own session is in the tree
        assert held.get(str(log)) in own and not others & own
    finally:
        os.killpg(parent.pid, 9)
        for pid in own - {parent.pid}:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        parent.wait()


def test_files_held_open_become_specs_unless_a_known_spec_covers_them(tmp_path: Path) -> None:
    event = tmp_path / "elsewhere" / "runs" / "a" / "events.out.tfevents.1700000000.vm.4242.0"
    wandb_log = tmp_path / "wandb" / "offline-run-20250101_000000-abc123" / "run-abc123.wandb"
    other_log = tmp_path / "wandb" / "offline-run-20250101_000100-zzz999" / "run-zzz999.wandb"
    held = {str(event): 4242, str(wandb_log): 4300, str(other_log): 4301, str(tmp_path / "slurm-1.out"): 4242,
            str(tmp_path / "mlflow.db"): 4242}  # a store of many runs: never a held spec
    recorded = [SourceSpec("wandb", "abc123", "the job's WANDB_RUN_ID", WriterIdentity(run_id="abc123"))]
    specs = held_specs(held, recorded)
    assert sorted((s.kind, s.locator) for s in specs) == [("tensorboard", str(event.parent)), ("wandb", str(other_log))]
    assert all(s.origin.startswith(HELD_ORIGIN) for s in specs)
    covered = held_specs(held, [SourceSpec("tensorboard", str(tmp_path / "elsewhere"))])
    assert ("tensorboard", str(event.parent)) not in [(s.kind, s.locator) for s in covered]


def test_of_several_runs_folders_the_one_holding_the_jobs_pid_is_picked(tmp_path: Path) -> None:
    # pids above Linux's pid_max (2^22): no process of this machine has one (a real pid 103 made c "running here")
    A, B, C = 4_194_401, 4_194_402, 4_194_403
    since = time.time() - 5
    stamp = int(since) + 1
    for name, pid in (("a", A), ("b", B), ("c", C)):
        folder = tmp_path / "runs" / name / "lightning_logs" / "version_0"
        folder.mkdir(parents=True)
        (folder / f"events.out.tfevents.{stamp}.vm.{pid}.0").write_bytes(b"")
    # empty files: their names say who wrote them, which is all the pick reads
    job = WriterIdentity(hosts=("vm",), pids=(B,), pid_hosts=("vm",), others=(A, C), since=since)
    specs, note = discover(tmp_path, since=since, job=job)
    assert [s.locator for s in specs] == [str(tmp_path / "runs" / "b" / "lightning_logs" / "version_0")], note
    unknown = WriterIdentity(hosts=("vm",), pids=(A + 10,), pid_hosts=("vm",), others=(A,), since=since)
    specs, note = discover(tmp_path, since=since, job=unknown)  # b and c could be anyone's: neither is taken
    assert specs == [] and "2 TensorBoard candidates" in note
    specs, note = discover(tmp_path, since=since)  # no job known (a folder read by hand): three candidates
    assert specs == [] and "3 TensorBoard candidates" in note


class _Source:
    def __init__(self, kind: str, name: str) -> None:
        self.kind, self.name = kind, name


def test_of_a_jobs_wandb_runs_the_newest_seen_written_is_judged_and_a_retired_one_never() -> None:
    recorded, first, second, log = (_Source("wandb", "recorded"), _Source("wandb", "first"), _Source("wandb", "second"),
                                    _Source("textlog", "log"))
    successive = {id(first), id(second)}
    assert judged_source([recorded, first, second, log], set(), successive) is second  # type: ignore[list-item]
    assert judged_source([recorded, first, second, log], {id(second)}, successive) is first  # type: ignore[list-item]
    assert judged_source([recorded, log], set(), successive) is recorded  # type: ignore[list-item]
    assert judged_source([log], set(), successive) is log  # type: ignore[list-item]
    assert judged_source([first], {id(first)}, successive) is None  # type: ignore[list-item]


def test_the_agents_run_process_is_the_topmost_carrying_the_sweep_id() -> None:
    """agent (no WANDB_SWEEP_ID) -> run process (WANDB_SWEEP_ID) -> its service (inherits it): the run process."""
    service = "import time; print('up', flush=True); time.sleep(60)"
    run = f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {service!r}]); time.sleep(60)"
    env = {k: v for k, v in os.environ.items() if k != "WANDB_SWEEP_ID"}
    agent = subprocess.Popen([sys.executable, "-c", "import os, subprocess, sys, time; subprocess.Popen("
                              "[sys.executable, '-c', sys.argv[1]], env={**os.environ, 'WANDB_SWEEP_ID': 's1'}); "
                              "time.sleep(60)", run], env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        tree: set[int] = set()
        while time.monotonic() < deadline and len(tree) < 3:
            time.sleep(0.3)
            tree, _, _, _ = job_processes("1", process_groups=True, pgid=agent.pid, now=time.time() + 10)
        leaf = max(tree, key=lambda pid: _depth(pid, agent.pid))
        run_process = agent_run_process(leaf, sorted(tree))
        assert run_process is not None and run_process not in (agent.pid, leaf)
        assert agent_run_process(agent.pid, sorted(tree)) is None  # the agent itself is never the run's process
    finally:
        os.killpg(agent.pid, 9)
        agent.wait()


def _depth(pid: int, root: int) -> int:
    depth = 0
    while pid != root and depth < 10:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            pid = int(handle.read().rsplit(b")", 1)[-1].split()[1])
        depth += 1
    return depth


def test_a_file_of_a_live_process_that_is_not_the_jobs_is_never_picked(tmp_path: Path) -> None:
    """A plain `python train.py` beside the job (no guarded job of its own, so no one's `others`): running now in the
    table where the job's processes are seen, it is someone else; the job's own file, once there, is picked."""
    from guarded_sbatch.sources.writers import this_host

    since = time.time() - 5
    stamp, host = int(since) + 1, this_host()
    neighbour = tmp_path / "runs" / "theirs"
    neighbour.mkdir(parents=True)
    (neighbour / f"events.out.tfevents.{stamp}.{host}.{os.getpid()}.0").write_bytes(b"")
    job = WriterIdentity(hosts=(host,), pids=(4_000_000,), pid_hosts=(host,), since=since)
    specs, note = discover(tmp_path, since=since, job=job)
    assert specs == [] and note == ""
    mine = tmp_path / "runs" / "mine"
    mine.mkdir()
    (mine / f"events.out.tfevents.{stamp}.{host}.4000000.0").write_bytes(b"")
    specs, _ = discover(tmp_path, since=since, job=job)
    assert [s.locator for s in specs] == [str(mine)]
