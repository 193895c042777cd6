"""The per-user shared monitor on the real dev Slurm: several guarded runs of the example trainer launched
the everyday way under one monitor job, two of them broken (a NaN early, a slow divergence after the
monitor was requeued from outside). Exactly those two are cancelled, each with its own evidence, one
FINAL_SUMMARY and one project note; the healthy ones complete untouched; one monitor job the whole time;
the requeued monitor resumes every run with no STOP lost or repeated. (`bench/demo_shared_monitor.sh` is the
20-run version of this scenario.)"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from e2e_helpers import make_project, submitted_job_id, wait_for
from multinode_helpers import release
from guarded_sbatch.scheduler.interface import JobState
from guarded_sbatch.scheduler.slurm import SlurmScheduler

pytestmark = [pytest.mark.slurm, pytest.mark.long]

STEPS = 3000  # 150 s at 0.05 s per step: the runs outlive the monitor's requeue
BREAKS = {1: ["--nan-at", "150"], 3: ["--drift-at", "1500"]}
RUNS = 5


def _monitor_jobs(state_dir: Path) -> set[str]:
    """The monitor jobs of this test's state folder that squeue lists right now (script or folder under it)."""
    listed = subprocess.run(["squeue", "-h", "-n", "guarded-sbatch-monitor", "-t", "all", "-o", "%i %Z %o"],
                            capture_output=True, text=True, timeout=30).stdout.splitlines()
    return {line.split()[0] for line in listed if line.strip() and str(state_dir) in line}


def test_one_monitor_job_stops_exactly_the_broken_runs_and_resumes_after_a_requeue(
    slurm_cluster: None, tmp_path: Path
) -> None:
    project = make_project(tmp_path, fast_interval=2.0, job_poll=5.0)
    config = Path(project.env["GUARDED_SBATCH_USER_CONFIG"])
    config.write_text(config.read_text() + 'mode = "per-user"\nmonitor_mem = "1G"\n', encoding="utf-8")
    notes = tmp_path / "NOTES.md"
    jobs: dict[int, str] = {}
    seen_monitors: list[set[str]] = []
    slurm = SlurmScheduler(state_dir=tmp_path / "watcher")
    try:
        for i in range(RUNS):
            launched = project.cli("--guard-notes", str(notes), "--job-name", f"synthetic-tanh-mlp-bs64-shared-r{i}",
                                   "train.sh", "--steps", str(STEPS), "--step-seconds", "0.05",
                                   "--logdir", f"runs/r{i}", *BREAKS.get(i, []))
            assert launched.returncode == 0, launched.stderr
            jobs[i] = submitted_job_id(launched.stdout)
            seen_monitors.append(_monitor_jobs(project.state_dir))
        records = {i: project.run_record(job) for i, job in jobs.items()}
        monitor_ids = {r.get("monitor_id") for r in records.values()}
        assert len(monitor_ids) == 1 and None not in monitor_ids and not any(r.get("sidecar_id") for r in records.values())
        (monitor,) = monitor_ids

        def monitor_output() -> str:
            return "".join(p.read_text(errors="replace") for p in project.state_dir.glob("shared-monitor/*/monitor-*.out"))

        # requeued only once its first attempt watches every run (on a loaded machine it may still be starting)
        wait_for(lambda: f"shared-r{RUNS - 1} (job" in monitor_output(), 120, 1, "the monitor to watch every run")
        subprocess.run(["scontrol", "requeue", monitor], check=True, capture_output=True, timeout=30)
        wait_for(lambda: "Restarts=1" in _scontrol(monitor), 60, 1, "the monitor to be requeued")
        release(monitor)

        def all_ended() -> bool:
            seen_monitors.append(_monitor_jobs(project.state_dir))
            return all(slurm.state(job).is_terminal for job in jobs.values())

        wait_for(all_ended, 420, 3, "every training job to end")
        wait_for(lambda: not _monitor_jobs(project.state_dir), 120, 3, "the monitor to leave with no live runs")
    finally:
        for job in jobs.values():
            subprocess.run(["scancel", job], capture_output=True, timeout=30)

    assert all(len(ids) <= 1 and ids <= {monitor} for ids in seen_monitors), seen_monitors
    states = {i: slurm.state(job) for i, job in jobs.items()}
    assert {i for i, s in states.items() if s is JobState.CANCELLED} == set(BREAKS), states
    assert all(states[i] is JobState.COMPLETED for i in range(RUNS) if i not in BREAKS), states
    note_titles = [line for line in notes.read_text().splitlines() if line.startswith("### ")]
    assert sorted(note_titles) == sorted(f"### synthetic-tanh-mlp-bs64-shared-r{i}: STOP ({reason})"
                                         for i, reason in ((1, "non_finite_loss"), (3, "divergence"))), note_titles
    for i, job in jobs.items():
        folder = project.state_dir / "runs" / Path(records[i]["run_id"])
        state = json.loads((folder / "sidecar-state.json").read_text())
        report = (folder / "sidecar-monitor.out").read_text()
        assert report.count("FINAL_SUMMARY") == (1 if i in BREAKS else 0), report[-2000:]
        assert bool(state["evidence"]) == (i in BREAKS), state
        assert state["last_decision"] == ("STOP" if i in BREAKS else "CONTINUE"), state
        others = [f"runs/r{k}/" for k in range(RUNS) if k != i]
        assert not any(other in report for other in others), f"run {i} cites a neighbour"
    output = monitor_output()
    assert output.count(f"shared monitor {monitor} starts") == 2, output[-3000:]  # the requeue
    resumed = [i for i in jobs if "resuming (restart 1)" in
               (project.state_dir / "runs" / records[i]["run_id"] / "sidecar-monitor.out").read_text()]
    assert set(resumed) >= {i for i in jobs if i != 1}, resumed  # every run still live at the requeue


def _scontrol(job_id: str) -> str:
    return subprocess.run(["scontrol", "-o", "show", "job", job_id], capture_output=True, text=True, timeout=30).stdout
