"""The learning-rate sweep of examples/lr_sweep launched as a job array the README's way (`guarded-sbatch train.sh`),
each task a tiny real torch trainer writing TensorBoard to runs/<name>-lr<lr>, task 2 going NaN at step 30; and what
the tests check of it, on the dev Slurm and on the local backend: that task alone is cancelled within 90 s of its
NaN at the default cadence, the other three complete, `status` has four rows with the right states and reasons, and
the one watcher job ends within a minute of the last task."""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from e2e_helpers import REPO, Project, submitted_job_id, wait_for
from test_first_hour_screens import on_pty, too_wide
from guarded_sbatch import read_metrics
from guarded_sbatch.scheduler.interface import JobState, Scheduler

EXAMPLE = REPO / "examples" / "lr_sweep"
NAME = "synthetic-tanh-torch-lrsweep"
LRS = ("0.05", "0.02", "0.01", "0.005")  # train.sh's, by task
NAN_TASK, NAN_AT = 2, 30
STEPS, STEP_S = 600, 0.2  # two minutes: the NaN task is still running when its STOP comes


@dataclass
class Sweep:
    project: Project
    job: str
    launched_at: float
    ended_at: dict[str, float]

    def task(self, t: int) -> str:
        return f"{self.job}_{t}"


def sweep_project(tmp_path: Path) -> Project:
    """examples/lr_sweep copied as a user would, a job name of its own (tests share one cluster), the default
    cadence (no interval set in the user config)."""
    root = tmp_path / "project"
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns("runs", "__pycache__"))
    name = f"{NAME}-t{uuid.uuid4().hex[:6]}"
    script = root / "train.sh"
    script.write_text(script.read_text().replace(f"--job-name={NAME}\n", f"--job-name={name}\n", 1))
    config = tmp_path / "user-config.toml"
    config.write_text('[sidecar]\nmem = "400M"\nevidence_plot = false\n', encoding="utf-8")
    env = {**os.environ, "GUARDED_SBATCH_STATE_DIR": str(tmp_path / "state"), "GUARDED_SBATCH_USER_CONFIG": str(config),
           "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
    env.pop("GUARDED_SBATCH_SITE_CONFIG", None)
    return Project(root, env, name)


def launch_sweep(project: Project, scheduler: Scheduler, *backend: str) -> Sweep:
    launched = project.cli(*backend, "train.sh", "--nan-task", str(NAN_TASK), "--nan-at", str(NAN_AT),
                           "--steps", str(STEPS), "--step-seconds", str(STEP_S))
    assert launched.returncode == 0, launched.stderr
    sweep = Sweep(project, submitted_job_id(launched.stdout), time.time(), {})
    tasks = [sweep.task(t) for t in range(len(LRS))]

    def all_ended() -> bool:
        now = time.time()
        for task, state in scheduler.states(tasks).items():
            if state.is_terminal:
                sweep.ended_at.setdefault(task, now)
        return len(sweep.ended_at) == len(tasks)

    wait_for(all_ended, 420, 2, "every task of the array to end")
    return sweep


def watcher_id(sweep: Sweep) -> str:
    records = [sweep.project.run_record(sweep.task(t)) for t in range(len(LRS))]
    watchers = {r.get("monitor_id") for r in records}
    assert len(watchers) == 1 and None not in watchers and not any(r.get("sidecar_id") for r in records), records
    return str(watchers.pop())


def nan_wall_time(sweep: Sweep) -> float:
    """When task 2 logged its first NaN, from its own event file."""
    folder = sweep.project.root / "runs" / f"{sweep.project.name}-lr{LRS[NAN_TASK]}"
    points = [p for p in read_metrics("tensorboard", folder) if p.key == "Loss/train" and math.isnan(p.value)]
    assert points, f"no NaN logged under {folder}"
    return min(p.wall_time for p in points)


def check_sweep(sweep: Sweep, scheduler: Scheduler, watcher_end: float) -> None:
    """The checks both backends share (see the module's docstring)."""
    project = sweep.project
    states = scheduler.states([sweep.task(t) for t in range(len(LRS))])
    assert {t: states[sweep.task(t)] for t in range(len(LRS))} == {
        t: JobState.CANCELLED if t == NAN_TASK else JobState.COMPLETED for t in range(len(LRS))}, states
    folder = project.state_dir / "runs" / project.run_record(sweep.task(NAN_TASK))["run_id"]
    sidecar = json.loads((folder / "sidecar-state.json").read_text())
    assert sidecar["last_decision"] == "STOP" and sidecar["last_reason"] == "non_finite_loss", sidecar
    assert sidecar["stop_requested_at"] - nan_wall_time(sweep) <= 90, sidecar["stop_requested_at"] - nan_wall_time(sweep)
    for t in range(len(LRS)):
        report = project.sidecar_output(sweep.task(t))
        assert f"-lr{LRS[t]}" in report and not any(f"-lr{LRS[o]}" in report for o in range(len(LRS)) if o != t), t
        assert report.count("FINAL_SUMMARY") == (1 if t == NAN_TASK else 0), report[-1500:]
    rows = json.loads(project.cli_here("status", "--json", check=True).stdout)["runs"]
    table = {row["job_id"]: (row["state"], row["decision"], row["reason"], row["stopped_by"]) for row in rows}
    assert table == {sweep.task(t): ("CANCELLED", "STOP", "non_finite_loss", "guard") if t == NAN_TASK else
                     ("COMPLETED", "CONTINUE", "healthy", None) for t in range(len(LRS))}, table
    exits = {row["job_id"]: row["exit"] for row in rows}
    stopped = exits[sweep.task(NAN_TASK)]  # as the backend reports it (a signal, an exit), never a clean 0:0
    assert stopped not in (None, "0:0"), exits
    plain = project.cli_here("status", check=True).stdout.splitlines()
    assert len(plain) == 1 + len(LRS), plain
    collapsed = json.loads(project.cli_here("status", "--json", "--collapse", check=True).stdout)["runs"]
    assert [(r["job_id"], r["state"], r["reason"]) for r in collapsed] == [
        (sweep.job, "COMPLETED(3),CANCELLED(1)", f"{sweep.task(NAN_TASK)} non_finite_loss")], collapsed
    code, lines, _ = on_pty(project, "status", "--collapse")  # the array's one row fits 80 columns, never wrapped
    assert code == 0 and not too_wide(lines), "\n".join(too_wide(lines))
    header, (row, *_) = lines[0].split(), [line.split() for line in lines[1:] if project.name in line]
    assert header[:2] == ["RUN", "JOB"] and row[:2] == [project.name, sweep.job], lines
    shown = project.cli_here("show", sweep.task(NAN_TASK), "--plain", check=True).stdout
    assert "STOP" in shown and f"lr{LRS[NAN_TASK]}" in shown
    assert watcher_end - max(sweep.ended_at.values()) <= 60, (watcher_end, sweep.ended_at)
