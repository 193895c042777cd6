"""A guard STOP ends a submitit job's processes within seconds, though submitit's job process ignores SIGTERM
("Bypassing signal SIGTERM"): TERM to the job's steps, KILL after the site's grace, then the cancel. On the real
dev Slurm: `GuardedExecutor.map_array` with one broken call among healthy ones."""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from pathlib import Path

import pytest

from e2e_helpers import wait_for
from guarded_sbatch.launch.executor import GuardStoppedError

WAIVE_CONFIG = {"config-diff": "a function job: no config file to diff"}


def sweep_call(tb_dir: str, pid_file: str, lr: float) -> str:
    """A trainer that logs a loss; lr >= 10 diverges to NaN at step 10 and would run ~2 minutes more."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    Path(pid_file).write_text(str(os.getpid()))
    writer = EventFileWriter(tb_dir)
    steps = 600 if lr >= 10 else 25
    for step in range(steps):
        loss = float("nan") if lr >= 10 and step >= 10 else 2.0 * (1 - lr) ** step + 0.1
        value = summary_pb2.Summary.Value(tag="train/loss", simple_value=loss)
        writer.add_event(event_pb2.Event(wall_time=time.time(), step=step, summary=summary_pb2.Summary(value=[value])))
        writer.flush()
        print(f"step {step} loss {loss}", flush=True)
        time.sleep(0.2)
    writer.close()
    return f"lr {lr} done"


@pytest.fixture()
def guarded_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    config = tmp_path / "user-config.toml"
    config.write_text("[sidecar]\nfast_interval_seconds = 1.0\njob_poll_seconds = 5.0\nmem = \"300M\"\n"
                      "evidence_plot = false\nkill_grace_seconds = 2.0\n")
    monkeypatch.setenv("GUARDED_SBATCH_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("GUARDED_SBATCH_USER_CONFIG", str(config))
    monkeypatch.delenv("GUARDED_SBATCH_SITE_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@pytest.mark.slurm
def test_a_stop_ends_a_submitit_calls_processes_within_seconds(guarded_env: Path, slurm_cluster: None) -> None:
    import cloudpickle

    from guarded_sbatch.launch.executor import GuardedExecutor
    from guarded_sbatch.records.registry import find_run
    from guarded_sbatch.scheduler.slurm import SlurmScheduler

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the job cannot import this test module
    name = f"sweep-mlp-bs64-{uuid.uuid4().hex[:6]}"
    (guarded_env / "runs" / name).mkdir(parents=True)
    executor = GuardedExecutor(guarded_env / "logs" / "%j", run_name=name, tb_dir=guarded_env / "runs" / name,
                               waivers=WAIVE_CONFIG, cluster="slurm")
    executor.update_parameters(timeout_min=5, mem_gb=0.3, cpus_per_task=1)
    lrs = [0.01, 100.0, 0.1]
    tb_dirs = [str(guarded_env / "runs" / name / f"lr{lr}") for lr in lrs]
    pid_files = [str(guarded_env / f"pid-{i}") for i in range(3)]
    jobs = executor.map_array(sweep_call, tb_dirs, pid_files, lrs)
    scheduler = SlurmScheduler()
    try:
        broken = jobs[1]
        record = find_run(broken.job_id)
        pid = int(wait_for(lambda: Path(pid_files[1]).is_file() and Path(pid_files[1]).read_text(), 120, 0.2,
                           what="the broken call to start"))
        # the moment the guard decided to stop, as its watcher records it (before it acts)
        stop_at = float(wait_for(lambda: (json.loads(record.sidecar_state_file.read_text() or "{}")
                                          if record.sidecar_state_file.is_file() else {}).get("stop_requested_at"),
                                 120, 0.1, what="the guard's STOP"))
        gone_at = wait_for(lambda: None if _alive(pid) else time.time(), 30, 0.1, what="the call's process to end")
        print(f"the broken call ended {gone_at - stop_at:.2f} s after the STOP")
        assert gone_at - stop_at < 5.0, f"the broken call's process ran {gone_at - stop_at:.1f} s after the STOP"
        wait_for(lambda: scheduler.state(broken.job_id).is_terminal, 30, 0.5, what="the task to end")
        assert scheduler.state(broken.job_id).value == "CANCELLED"
        with pytest.raises(GuardStoppedError, match=r"STOP, non_finite_loss.*its processes ended at \d\d:\d\d:\d\d, "
                                                    r"[\d.]+ s after the stop \(TERM, then KILL after 2 s"):
            broken.result()
        log = Path(str(broken.paths.stdout)).read_text()
        assert "step 10 loss nan" in log and "step 599" not in log
        assert [jobs[0].result(), jobs[2].result()] == ["lr 0.01 done", "lr 0.1 done"]
        assert [scheduler.state(job.job_id).value for job in (jobs[0], jobs[2])] == ["COMPLETED", "COMPLETED"]
    finally:
        for job in jobs:
            scheduler.cancel(job.job_id)
