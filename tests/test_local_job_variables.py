"""The local backend gives a job script the SLURM_* variables it reads, true to what it runs, and the run's
recorded folders fill in $SLURM_JOB_ID / $SLURM_JOB_NAME the same way on both backends (local and the dev Slurm)."""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path

import pytest
from e2e_helpers import make_project, submitted_job_id, wait_for
from package_extras import recorded_tb
from guarded_sbatch.scheduler import get_scheduler
from guarded_sbatch.scheduler.interface import JobState, SubmitRequest
from guarded_sbatch.scheduler.local import LocalScheduler

NAMES = ("SLURM_JOB_ID", "SLURM_JOBID", "SLURM_JOB_NAME", "SLURM_SUBMIT_DIR", "SLURM_SUBMIT_HOST", "SLURM_NTASKS",
         "SLURM_CPUS_PER_TASK", "SLURM_JOB_NUM_NODES", "SLURM_NNODES", "SLURM_NODELIST", "SLURM_JOB_NODELIST",
         "SLURMD_NODENAME", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_JOB_USER", "SLURM_CLUSTER_NAME",
         "SLURM_JOB_PARTITION", "SLURM_ARRAY_TASK_ID", "SLURM_CONF")


def test_a_local_job_reads_the_slurm_variables_of_what_it_runs(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # submitted from inside another job (salloc): that job's variables must not leak in, Slurm's own config may
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "3")
    monkeypatch.setenv("SLURM_CONF", "/etc/slurm/slurm.conf")
    script = tmp_path / "job.sh"
    lines = "\n".join(f'echo "{name}=${{{name}-<unset>}}"' for name in NAMES)
    script.write_text(f"#!/bin/bash\n#SBATCH --job-name=vars-probe\n#SBATCH --cpus-per-task=2\nset -u\n{lines}\n")
    scheduler = LocalScheduler(tmp_path / "jobs")
    job_id = scheduler.submit(SubmitRequest(script=script, sbatch_options=("--partition=debug", "--output=out-%j.txt"),
                                            workdir=tmp_path))
    assert wait_for(lambda: scheduler.state(job_id).is_terminal, 30, 0.2, "the probe job")
    assert scheduler.state(job_id) is JobState.COMPLETED
    seen = dict(line.split("=", 1) for line in (tmp_path / f"out-{job_id}.txt").read_text().splitlines())
    node = socket.gethostname().split(".")[0]
    assert seen == {
        "SLURM_JOB_ID": job_id, "SLURM_JOBID": job_id, "SLURM_JOB_NAME": "vars-probe",
        "SLURM_SUBMIT_DIR": str(tmp_path), "SLURM_SUBMIT_HOST": socket.gethostname(), "SLURM_NTASKS": "1",
        "SLURM_CPUS_PER_TASK": "2", "SLURM_JOB_NUM_NODES": "1", "SLURM_NNODES": "1", "SLURM_NODELIST": node,
        "SLURM_JOB_NODELIST": node, "SLURMD_NODENAME": node, "SLURM_PROCID": "0", "SLURM_LOCALID": "0",
        "SLURM_NODEID": "0", "SLURM_JOB_USER": scheduler.current_user(), "SLURM_CLUSTER_NAME": "local",
        "SLURM_JOB_PARTITION": "debug", "SLURM_ARRAY_TASK_ID": "<unset>", "SLURM_CONF": "/etc/slurm/slurm.conf",
    }


def test_a_local_job_takes_sigint_even_when_its_launch_ignored_it(tmp_path: Path) -> None:
    """Launched from where SIGINT is ignored (nohup, a script's background `&`), the job would inherit that and a
    stop's SIGINT would do nothing until the grace ran out: the job starts with SIGINT's default action."""
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\ngrep -E '^SigIgn:' /proc/self/status\n")
    scheduler = LocalScheduler(tmp_path / "jobs")
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        job_id = scheduler.submit(SubmitRequest(script=script, sbatch_options=("--output=out-%j.txt",),
                                                workdir=tmp_path))
    finally:
        signal.signal(signal.SIGINT, previous)
    assert wait_for(lambda: scheduler.state(job_id).is_terminal, 30, 0.2, "the probe job")
    ignored = int((tmp_path / f"out-{job_id}.txt").read_text().split()[1], 16)
    assert not ignored & (1 << (signal.SIGINT - 1)), hex(ignored)


@pytest.mark.parametrize("backend", ["local", pytest.param("slurm", marks=pytest.mark.slurm)])
def test_a_logdir_named_from_slurm_variables_runs_under_set_u_and_is_read(tmp_path: Path, backend: str,
                                                                         request: pytest.FixtureRequest) -> None:
    if backend == "slurm":
        request.getfixturevalue("slurm_cluster")
    project = make_project(tmp_path, fast_interval=1.0)
    script = project.root / "train.sh"
    text = script.read_text()
    assert "set -euo pipefail" in text
    script.write_text(text.replace('configs/synthetic-tanh-mlp.yaml "$@"',
                                   'configs/synthetic-tanh-mlp.yaml --logdir "runs/${SLURM_JOB_NAME}-${SLURM_JOB_ID}" "$@"'))
    result = project.cli("--guard-backend", backend, "train.sh", "--steps", "150", "--step-seconds", "0.02",
                         "--flush-secs", "1")
    assert result.returncode == 0, result.stderr
    job_id = submitted_job_id(result.stdout)
    record = project.run_record(job_id)
    own = project.root / "runs" / f"{project.name}-{job_id}"
    assert recorded_tb(record) == [str(own)]
    scheduler = LocalScheduler(project.state_dir / "local-jobs") if backend == "local" else get_scheduler("slurm")
    assert wait_for(lambda: scheduler.state(job_id).is_terminal, 180, what="training to end")
    assert scheduler.state(job_id) is JobState.COMPLETED, (project.root / f"slurm-{job_id}.out").read_text()
    assert list(own.glob("events.out.tfevents.*"))
    wait_for(lambda: scheduler.state(record["sidecar_id"]).is_terminal, 60, what="the sidecar to exit")
    output = project.sidecar_output(job_id)
    assert "tensorboard_ok" in output and str(own) in output, output[-3000:]
    assert os.path.basename(str(own)) != f"{project.name}-"  # the id was filled in, not dropped
