"""A W&B sweep agent inside one guarded job (offline W&B, no server): the job runs two W&B runs one after another,
each in a process of its own carrying WANDB_SWEEP_ID and its run id — what `wandb agent SWEEP` does for each run it
is handed — the first diverging. Each W&B run is judged as its own run (sidecar/tracker_runs.py): the diverging one
is stopped alone (its process; the report names that W&B run), the second run is judged on its own history only,
never merged with the first's, and completes; the job goes on to its end."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from conftest import require
from e2e_helpers import make_project, submitted_job_id, wait_for
from guarded_sbatch.scheduler.interface import JobState, Scheduler

pytestmark = [pytest.mark.frameworks, pytest.mark.waits]

TRAINER = '''"""One offline W&B run, as a sweep agent's run process does: healthy, or diverging from a step on."""
import argparse
import math
import time

import wandb

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=300)
parser.add_argument("--diverge-at", type=int, default=0)
parser.add_argument("--step-seconds", type=float, default=0.1)
args = parser.parse_args()
run = wandb.init(mode="offline", project="guarded-sweep", config=vars(args))
for step in range(1, args.steps + 1):
    loss = 2.0 * math.exp(-step / 60) + 0.1
    if args.diverge_at and step >= args.diverge_at:
        loss = 2.0 * 1.3 ** (step - args.diverge_at + 1)
    run.log({"train/loss": loss, "lr": 0.01}, step=step)
    time.sleep(args.step_seconds)
run.finish()
print(f"run {run.id} finished after {args.steps} steps", flush=True)
'''

JOB = '''#!/bin/bash
#SBATCH --job-name={name}
#SBATCH --ntasks=1
#SBATCH --mem=1G
#SBATCH --time=00:10:00
cd "${{SLURM_SUBMIT_DIR:-.}}"
# what `wandb agent SWEEP` does with each run it is handed: a process of its own, with the sweep's and the run's ids
WANDB_SWEEP_ID=sw{tag} WANDB_RUN_ID=diverging{tag} python wandb_train.py --steps 400 --diverge-at 60 \\
  || echo "agent: run diverging{tag} ended with $?"
WANDB_SWEEP_ID=sw{tag} WANDB_RUN_ID=healthy{tag} python wandb_train.py --steps 250
echo "agent: sweep done"
'''


@pytest.mark.parametrize("backend", ["local", pytest.param("slurm", marks=pytest.mark.slurm)])
def test_each_wandb_run_of_an_agent_job_is_judged_and_stopped_on_its_own(tmp_path: Path, backend: str,
                                                                         request: pytest.FixtureRequest) -> None:
    require(importlib.util.find_spec("wandb") is not None, "wandb not installed")
    if backend == "slurm":
        request.getfixturevalue("slurm_cluster")
    project = make_project(tmp_path)
    tag = project.name[-6:]
    (project.root / "wandb_train.py").write_text(TRAINER, encoding="utf-8")
    (project.root / "agent.sh").write_text(JOB.format(name=project.name, tag=tag), encoding="utf-8")
    project.env.update({"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_PROJECT": "guarded-sweep"})
    project.env.pop("GUARDED_SBATCH_BACKEND", None)
    if backend == "local":
        project.env["GUARDED_SBATCH_BACKEND"] = "local"
    launched = project.cli("agent.sh", timeout=120)
    assert launched.returncode == 0, launched.stderr
    job_id = submitted_job_id(launched.stdout)
    record = project.run_record(job_id)

    scheduler: Scheduler
    if backend == "local":
        from guarded_sbatch.scheduler.local import LocalScheduler

        scheduler = LocalScheduler(project.state_dir / "local-jobs")
    else:
        from guarded_sbatch.scheduler.slurm import SlurmScheduler

        scheduler = SlurmScheduler(state_dir=tmp_path / "test-slurm-cache")
    wait_for(lambda: scheduler.state(job_id).is_terminal, 240, 1, "the agent job to end")
    wait_for(lambda: scheduler.state(record["sidecar_id"]).is_terminal, 90, 1, "its sidecar to end")
    output = project.sidecar_output(job_id)
    job_log = (project.root / f"slurm-{job_id}.out").read_text(errors="replace")

    # the diverging W&B run: stopped alone, the report naming it; the agent went on to the next run
    stop = re.search(r"^- Run: \S+ \(job \d+\) — (\S+)\n(?:- .*\n)*?- Decision: STOP\n", output, re.MULTILINE)
    assert stop and stop.group(1).endswith(f"diverging{tag}"), output[-3000:]
    assert f"stop of W&B run guarded-sweep/diverging{tag} done" in output, output[-3000:]
    evidence = project.state_dir / "runs" / record["run_id"] / "evidence" / f"diverging{tag}" / "evidence.json"
    assert evidence.is_file() and f"evidence {evidence}" in output, output[-3000:]  # that W&B run's own
    assert f"agent: run diverging{tag} ended with" in job_log and f"run healthy{tag} finished" in job_log, job_log
    # the second W&B run: judged on its own history (healthy), and the job ended of itself
    judged_after = output.split(f"stop of W&B run guarded-sweep/diverging{tag} done", 1)[1]
    runs = re.findall(r"^- Run: \S+ \(job \d+\) — (guarded-sweep/\S+)$", judged_after, re.MULTILINE)
    assert runs and set(runs) == {f"guarded-sweep/healthy{tag}"}, judged_after[-3000:]
    assert "- Decision: STOP" not in judged_after and "FINAL_SUMMARY" not in output, judged_after[-3000:]
    assert scheduler.state(job_id) is JobState.COMPLETED, output[-3000:]
    assert re.search(r"ended COMPLETED; sidecar done \(final decision CONTINUE", output), output[-2000:]
