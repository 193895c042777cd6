"""Writer identity: a run's sidecar reads only the files its own job wrote.

- A real second Unix user (made here with useradd; the suite runs as root) writes a NaN event file, a text log
  and a W&B log into the run's folder with setpriv: none of them is ever read, nor chosen for deletion.
- Two real writers in one folder (two local jobs running torch's SummaryWriter, one of them NaN, as one config
  launched twice would): each run's source set judges only its own file, by the pid and host in the event
  file's name and the job's processes; without that knowledge it names the candidates and WAITs, never STOPs.
"""

from __future__ import annotations

import io
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from conftest import require
from source_writers import tb_event, write_tb_events
from package_extras import tb_specs
from guarded_sbatch.sources.run_sources import RunSources, SourceSpec, WriterIdentity
from guarded_sbatch.judge.policy import RunContext
from guarded_sbatch.scheduler.interface import Scheduler, SubmitRequest
from guarded_sbatch.scheduler.local import LocalScheduler
from guarded_sbatch.sidecar.one_shot import judge_sources
from guarded_sbatch.sidecar.plan import WatchPlan
from guarded_sbatch.sidecar.source_set import SourceSet
from guarded_sbatch.sources.kinds import run_files

COWORKER = "gsb-cowriter"


@pytest.fixture()
def coworker() -> int:
    require(os.geteuid() == 0, "needs root to create a second Unix user")
    if subprocess.run(["id", COWORKER], capture_output=True, timeout=10).returncode != 0:
        subprocess.run(["useradd", "-M", "-s", "/usr/sbin/nologin", COWORKER], check=True, timeout=30)
    return int(subprocess.run(["id", "-u", COWORKER], capture_output=True, text=True, check=True, timeout=10).stdout)


@pytest.fixture()
def shared_folder() -> Iterator[Path]:
    """A project folder both users can write (pytest's own tmp folder is private to root)."""
    folder = Path(tempfile.mkdtemp(prefix="gsb-writers-", dir="/tmp"))
    folder.chmod(0o777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def as_coworker(*argv: str) -> None:
    subprocess.run(["setpriv", f"--reuid={COWORKER}", f"--regid={COWORKER}", "--clear-groups", *argv],
                   check=True, timeout=30, capture_output=True)


def coworker_copy(source: Path, target: Path) -> None:
    """The co-worker writes `target` (their uid creates it), with the bytes of `source`."""
    source.chmod(0o644)
    source.parent.chmod(0o755)
    as_coworker("cp", str(source), str(target))
    assert target.stat().st_uid != os.geteuid()


def monitor_once(*args: str) -> dict[str, object]:
    from guarded_sbatch.cli.monitor import run_monitor

    from guarded_sbatch.cli.monitor import ONCE_EXIT

    out = io.StringIO()
    with redirect_stdout(out):
        code = run_monitor(["--once", "--json", *args])
    payload = json.loads(out.getvalue())
    assert code == ONCE_EXIT[payload["decision"]]  # the decision is the exit code
    return payload


def healthy_events(count: int) -> list:  # type: ignore[type-arg]
    return [tb_event(step, "train/loss", 2.0 * math.exp(-step / 40) + 0.1, wall_time=time.time() + step)
            for step in range(count)]


def test_files_another_user_wrote_in_the_runs_folder_are_never_read(
        coworker: int, shared_folder: Path) -> None:
    run = shared_folder / "runs" / "exp"
    run.mkdir(parents=True)
    run.chmod(0o777)
    write_tb_events(run, healthy_events(50))
    # theirs: NaN at far-future steps and wall times, as a planted file would be
    planted = write_tb_events(shared_folder / "staging", [tb_event(10_000 + s, "train/loss", math.nan, wall_time=4e9 + s)
                                                   for s in range(30)])
    coworker_copy(planted, run / f"events.out.tfevents.{int(time.time())}.{os.uname().nodename}.4242.0")
    verdict = monitor_once("--tb", str(run))
    assert verdict["decision"] == "CONTINUE" and verdict["last_step"] == 49, verdict

    alone = shared_folder / "runs" / "only-theirs"
    alone.mkdir()
    alone.chmod(0o777)
    coworker_copy(planted, alone / planted.name)
    verdict = monitor_once("--tb", str(alone))
    assert verdict["decision"] == "WAIT", verdict
    assert f"uid {coworker}" in str(verdict["message"]), verdict

    log = shared_folder / "staging" / "nan.log"
    log.write_text("".join(f"step {s} loss nan\n" for s in range(40)))
    theirs_log = shared_folder / "train.log"
    coworker_copy(log, theirs_log)
    verdict = monitor_once("--log", str(theirs_log))
    assert verdict["decision"] == "WAIT" and COWORKER in str(verdict["message"]), verdict


def test_his_file_named_after_a_process_running_now_is_never_the_run_judged(coworker: int, shared_folder: Path) -> None:
    run = shared_folder / "runs" / "live-pid"
    run.mkdir(parents=True)
    run.chmod(0o777)
    write_tb_events(run, healthy_events(50))
    planted = write_tb_events(shared_folder / "staging-pid", [tb_event(10_000 + s, "train/loss", math.nan) for s in range(30)])
    coworker_copy(planted, run / f"events.out.tfevents.{int(time.time())}.{os.uname().nodename}.1.0")  # pid 1 runs
    verdict = monitor_once("--tb", str(run))
    assert verdict["decision"] == "CONTINUE" and verdict["last_step"] == 49, verdict


def test_a_wandb_run_folder_another_user_owns_is_not_read_nor_deleted(coworker: int, shared_folder: Path) -> None:
    ours = shared_folder / "wandb" / "offline-run-20261203_100000-ab12cd34"
    theirs = shared_folder / "wandb" / "offline-run-20261203_100500-ab12cd34"
    ours.mkdir(parents=True)
    (ours / "run-ab12cd34.wandb").write_bytes(b":W&B\xbe\xe1\x00")
    (shared_folder / "wandb").chmod(0o777)
    as_coworker("mkdir", str(theirs))
    as_coworker("cp", str(ours / "run-ab12cd34.wandb"), str(theirs / "run-ab12cd34.wandb"))
    spec = SourceSpec("wandb", "ab12cd34", "guarded-sbatch", WriterIdentity(uid=os.geteuid(), run_id="ab12cd34"),
                      search=(str(shared_folder),))
    assert run_files([spec]) == [str(ours)]  # the co-worker's folder of the same id is never chosen for deletion
    settings = WatchPlan(run_name="r", job_id=None, state_file=shared_folder / "s.json",
                               evidence_dir=shared_folder / "e", sources=[],
                               identity=RunSources(workdir=str(shared_folder), specs=[
                                   SourceSpec("wandb", "ab12cd34", "guarded-sbatch", WriterIdentity(run_id="ab12cd34"),
                                              (str(shared_folder),))]))
    sources = SourceSet(settings, None, live=False)
    sources.read()
    assert [s.describe() for s in sources.sources if s.kind == "wandb"] == [str(ours / "run-ab12cd34.wandb")]


WRITER = """
import math, os, sys, time
from pathlib import Path
from torch.utils.tensorboard import SummaryWriter
logdir, broken, marker = sys.argv[1], sys.argv[2] == "nan", Path(sys.argv[3])
writer = SummaryWriter(log_dir=logdir)
for step in range(60):
    loss = math.nan if broken and step >= 20 else 2.0 * math.exp(-step / 30) + 0.1
    writer.add_scalar("train/loss", loss, step)
writer.flush()
marker.write_text(str(os.getpid()))
for tick in range(600):  # a live trainer goes on writing: both writers are active at the same time
    writer.add_scalar("train/lr", 1e-3, 60 + tick)
    writer.flush()
    time.sleep(0.5)
"""


def _start_writer(scheduler: Scheduler, folder: Path, logdir: Path, mode: str, options: tuple[str, ...]) -> tuple[str, int]:
    """A job whose process writes `logdir` with torch's SummaryWriter; its id and the writer's pid."""
    script = folder / f"train-{mode}.sh"
    script.write_text(f"#!/bin/bash\nexec {sys.executable} {folder / 'writer.py'} {logdir} {mode} {folder / mode}.done\n")
    job_id = scheduler.submit(SubmitRequest(script=script, sbatch_options=options, workdir=folder))
    marker = folder / f"{mode}.done"
    deadline = time.monotonic() + 240  # the shared dev Slurm may queue it a while
    while not (marker.exists() and marker.read_text().strip()):
        assert time.monotonic() < deadline, f"the {mode} writer did not write"
        assert not scheduler.state(job_id).is_terminal, f"the {mode} writer job ended: {scheduler.info(job_id)}"
        time.sleep(0.3)
    return job_id, int(marker.read_text())


def _judge(folder: Path, sources: RunSources, scheduler: Scheduler | None,
           job_id: str) -> tuple[str, str, str, WriterIdentity]:
    settings = WatchPlan(run_name=f"run-{job_id}", job_id=job_id, state_file=folder / f"state-{job_id}.json",
                               evidence_dir=folder / f"evidence-{job_id}", identity=sources)
    source_set = SourceSet(settings, scheduler, live=False)
    source_set.read()
    verdict = judge_sources(source_set, None, RunContext(job_live=False))
    inspected = ",".join(p for p in source_set.files_inspected() if "tfevents" in p)
    return verdict.decision.value, verdict.message, inspected, source_set.job_writer()


def two_writers_in_one_folder(scheduler: Scheduler, tmp_path: Path, options: tuple[str, ...] = ()) -> None:
    """The job's processes are seen in this host's process table (the dev Slurm's nodes share it), so each run
    reads its own file; no run is ever stopped on the other's file, and files of unknown writers are named and
    waited on."""
    pytest.importorskip("torch")
    (tmp_path / "writer.py").write_text(WRITER)
    logdir = tmp_path / "runs" / "shared"
    since = time.time() - 1  # both launched within one second: the start time alone cannot tell them apart
    jobs: list[str] = []
    try:
        healthy, healthy_pid = _start_writer(scheduler, tmp_path, logdir, "healthy", options)
        jobs.append(healthy)
        broken, broken_pid = _start_writer(scheduler, tmp_path, logdir, "nan", options)
        jobs.append(broken)
        files = sorted(p.name for p in logdir.iterdir())
        assert len(files) == 2, files
        recorded = RunSources(since=since, workdir=str(tmp_path), specs=tb_specs(logdir), uid=os.geteuid())

        decision, message, read, seen = _judge(tmp_path, recorded, scheduler, healthy)
        assert decision == "CONTINUE", message
        assert read.count("tfevents") == 1 and f".{healthy_pid}." in read, read

        decision, message, read, _ = _judge(tmp_path, recorded, scheduler, broken)
        assert decision == "STOP" and "nan" in message.lower(), message
        assert read.count("tfevents") == 1 and f".{broken_pid}." in read, read

        # after the end, nothing known of the writers (an older record): both named, a WAIT, never a STOP
        decision, message, read, _ = _judge(tmp_path, recorded, None, healthy)
        assert decision == "WAIT" and all(name in message for name in files), message

        # what the healthy run's sidecar saw of its job, kept in its record, tells them apart again
        seen = replace(seen, uid=None, since=0.0)
        assert healthy_pid in seen.pids, seen
        decision, message, _, _ = _judge(tmp_path, replace(recorded, seen=seen), None, healthy)
        assert decision == "CONTINUE", message
    finally:
        for job in jobs:
            scheduler.cancel(job)
        deadline = time.monotonic() + 60
        while not all(scheduler.state(j).is_terminal for j in jobs) and time.monotonic() < deadline:
            time.sleep(0.3)


def test_two_real_writers_in_one_folder_each_local_run_judges_only_its_own(tmp_path: Path) -> None:
    two_writers_in_one_folder(LocalScheduler(tmp_path / "jobs"), tmp_path)


@pytest.mark.slurm
def test_two_real_writers_in_one_folder_each_slurm_job_judges_only_its_own(tmp_path: Path, slurm_cluster: None) -> None:
    from guarded_sbatch.scheduler.slurm import SlurmScheduler

    # both on one node of the dev Slurm (its nodes are namespaces of this host: one process table, each process
    # naming its node), read from the login side as the sidecar reads them
    two_writers_in_one_folder(SlurmScheduler(), tmp_path, ("--mem=1G", "--time=5", f"--output={tmp_path}/slurm-%j.out",
                                                           f"--nodelist={_first_node()}"))


def _first_node() -> str:
    import subprocess

    names = subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True, timeout=30).stdout.split()
    return sorted(names)[0] if names else "localhost"
