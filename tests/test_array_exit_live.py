"""Issue 45: `status` EXIT of an array task that raised is 1:0 after Slurm has forgotten the job, read live on the
dev Slurm. One guarded array of two tasks: task 0 trains and ends 0, task 1 trains and then a Python step raises
(exit 1). Once slurmctld has purged both tasks (MinJobAge, 10 s on the dev Slurm: waited for by asking scontrol),
what remains is sacct's lines (the task's own, `.batch`, `.extern`, the steps); `status` must read the task's own
line (1:0), not a step's (the `.batch` line once gave 0:0). A scheduler with nothing remembered (a stranger's cache)
answers from sacct alone, so the sacct path is the one asserted, whatever the sidecar cached while the job lived.
Two forms of "a task that raised": a batch script whose Python step raised, and a GuardedExecutor.map_array function
that raised. On the dev Slurm (22.05) both write 1:0 on the task's own line and on its `.batch` line; a `.batch` line
of 0:0 beside a job line of 1:0 (what the old choice of line turned into 0:0) is tests/test_sacct_exit.py's case."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from e2e_helpers import make_project, submitted_job_id, wait_for
from guarded_sbatch.scheduler import get_scheduler

pytestmark = [pytest.mark.waits, pytest.mark.slurm]

ARRAY = """#!/bin/bash
#SBATCH --job-name={name}-raise
#SBATCH --array=0-1
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=1
#SBATCH --mem=400M
#SBATCH --time=00:05:00
set -euo pipefail
srun python train.py --config configs/synthetic-tanh-mlp.yaml --steps 40 --step-seconds 0.02 \\
  --logdir "runs/raise-$SLURM_ARRAY_TASK_ID"
if [ "$SLURM_ARRAY_TASK_ID" = 1 ]; then
  srun python -c 'raise RuntimeError("task 1: evaluation failed")'
fi
"""


MAP_ARRAY = """import sys
import time

from guarded_sbatch import GuardedExecutor


def evaluate(task: int) -> int:
    time.sleep(2)
    if task == 1:
        raise RuntimeError("task 1: evaluation failed")
    return task


if __name__ == "__main__":
    executor = GuardedExecutor("logs/%j", run_name=sys.argv[1], tb_dir="runs",
                               waivers={"config-diff": "a function: no config file"}, cluster="slurm")
    executor.update_parameters(timeout_min=5, mem_gb=1, cpus_per_task=1)
    jobs = executor.map_array(evaluate, [0, 1])
    print(" ".join(job.job_id for job in jobs), flush=True)
"""


def _scontrol_knows(job_id: str) -> bool:
    done = subprocess.run(["scontrol", "-o", "show", "job", job_id], capture_output=True, text=True, timeout=30)
    return done.returncode == 0 and "JobId=" in done.stdout


def _sacct_lines(job_id: str) -> str:
    return subprocess.run(["sacct", "-n", "-P", "-j", job_id, "-o", "JobID,ExitCode,State"], capture_output=True,
                          text=True, timeout=60, check=True).stdout


@pytest.mark.parametrize("form", ["script", "map_array"])
def test_status_exit_of_a_raised_array_task_is_1_0_once_slurm_forgot_it(slurm_cluster: None, tmp_path: Path,
                                                                        form: str) -> None:
    project = make_project(tmp_path, fast_interval=1.0, job_poll=5.0)
    if form == "script":  # a batch script whose Python step raised
        (project.root / "array.sh").write_text(ARRAY.format(name=project.name))
        launched = project.cli("array.sh", timeout=180)
        assert launched.returncode == 0, launched.stderr
        array = submitted_job_id(launched.stdout)
        tasks = [f"{array}_0", f"{array}_1"]
    else:  # a submitit function that raised (GuardedExecutor.map_array)
        (project.root / "map_array.py").write_text(MAP_ARRAY)
        done = subprocess.run([sys.executable, "map_array.py", f"{project.name}-raise"], cwd=project.root,
                              env=project.env, capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, done.stderr
        tasks = done.stdout.split()
        assert len(tasks) == 2 and tasks[1].endswith("_1"), done.stdout
    asker = get_scheduler("slurm", state_dir=tmp_path / "asker")
    wait_for(lambda: all(asker.state(task).is_terminal for task in tasks), 300, 2, "both tasks to end")
    wait_for(lambda: not any(_scontrol_knows(task) for task in tasks), 240, 2, "slurmctld to forget the tasks")
    # sacct knows the steps by now: the raising step's line is there beside the task's own
    def task_lines() -> str | None:
        text = _sacct_lines(tasks[1])
        return text if f"{tasks[1]}.batch|" in text else None

    lines = wait_for(task_lines, 120, 2, "sacct's lines of task 1")
    assert f"{tasks[1]}|1:0|FAILED" in lines, lines

    stranger = get_scheduler("slurm", state_dir=tmp_path / "stranger")  # nothing remembered: sacct alone
    assert [stranger.info(task).exit_code for task in tasks] == [0, 1]

    done = project.cli("status", "--json", timeout=120, check=True)
    rows = {row["job_id"]: row for row in json.loads(done.stdout)["runs"]}
    assert (rows[tasks[1]]["state"], rows[tasks[1]]["exit"]) == ("FAILED", "1:0"), (rows[tasks[1]], lines)
    assert (rows[tasks[0]]["state"], rows[tasks[0]]["exit"]) == ("COMPLETED", "0:0"), rows[tasks[0]]
