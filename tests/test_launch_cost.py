"""A launch costs the same whatever the history (launch/live_jobs.py, launch/checks/own_folder.py, the registry's
index of ended runs): one question to the scheduler about all of the user's jobs per pre-flight, with 1 or 60
recorded runs; a run found over is remembered and never read or asked about again. Local backend with real jobs,
and the dev Slurm with its commands counted."""

from __future__ import annotations

import shutil
import time
from collections import Counter
from pathlib import Path

import pytest
from e2e_helpers import EXAMPLE, wait_for
from guarded_sbatch.records import registry
from guarded_sbatch.core.config import Config
from guarded_sbatch.records.registry import ENDED, create_run, open_runs, over_runs
from guarded_sbatch.sbatch.argv import split_sbatch_argv
from guarded_sbatch.launch.preflight import PreflightReport, run_preflight
from guarded_sbatch.scheduler.delegating import DelegatingScheduler
from guarded_sbatch.scheduler.interface import JobInfo, JobState, Scheduler, SubmitRequest
from guarded_sbatch.scheduler.local import LocalScheduler

TB = "runs/synthetic-tanh-mlp-bs64-lr5e-2"  # the example config's logdir


class Counting(DelegatingScheduler):
    """Counts every question asked of the scheduler."""

    def __init__(self, inner: Scheduler) -> None:
        super().__init__(inner)
        self.calls: Counter[str] = Counter()

    def state(self, job_id: str) -> JobState:
        self.calls["state"] += 1
        return super().state(job_id)

    def states(self, job_ids: list[str]) -> dict[str, JobState]:
        self.calls["states"] += 1
        return super().states(job_ids)

    def info(self, job_id: str) -> JobInfo:
        self.calls["info"] += 1
        return super().info(job_id)

    def user_jobs(self) -> list[JobInfo]:
        self.calls["user_jobs"] += 1
        return super().user_jobs()

    def active_job_names(self) -> set[str]:
        self.calls["active_job_names"] += 1
        return super().active_job_names()


def _project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "project"
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns("events.out.tfevents.*", "__pycache__"))
    monkeypatch.setenv("GUARDED_SBATCH_STATE_DIR", str(tmp_path / "state"))
    return root


def _history(project: Path, count: int, backend: str) -> None:
    """`count` runs of this config recorded long ago (their jobs long gone), each writing its folder."""
    for index in range(count):
        record = create_run(f"old-run-{index}", backend, str(990000 + index),
                            sources={"specs": [{"kind": "tensorboard", "locator": str(project / TB)}]})
        registry.update_record(record.folder, lambda data: data.update(submitted_at=time.time() - 86400))


def _preflight(project: Path, scheduler: Scheduler) -> PreflightReport:
    launch = split_sbatch_argv(["--guard-waive", "config-diff=test", "train.sh"])
    return run_preflight(launch, Config(), scheduler, cwd=project)


def _own_folder(report: PreflightReport) -> tuple[str, str]:
    found = next(r for r in report.results if r.name == "own-folder")
    return found.status.value, found.finding


@pytest.mark.parametrize("history", [1, 60])
def test_a_launch_asks_the_scheduler_once_whatever_the_history(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               history: int) -> None:
    project = _project(tmp_path, monkeypatch)
    jobs = LocalScheduler(tmp_path / "state" / "local-jobs")
    _history(project, history, "local")
    script = tmp_path / "sleep.sh"
    script.write_text("#!/bin/bash\nsleep 60\n", encoding="utf-8")
    live = jobs.submit(SubmitRequest(script=script, workdir=tmp_path))
    try:
        create_run("live-run", "local", live, sources={"specs": [{"kind": "tensorboard", "locator": str(project / TB)}]})
        first = Counting(jobs)
        status, finding = _own_folder(_preflight(project, first))
        # one question for the run-name check and the own-folder check together; no job asked about one by one
        assert first.calls == Counter(user_jobs=1), first.calls
        assert status == "failed" and f"job {live}" in finding and "old-run" not in finding
        assert set(over_runs()) == {f"old-run-{i}-{990000 + i}" for i in range(history)}
        assert set(over_runs().values()) == {ENDED}

        read: list[Path] = []
        original = registry.read_json
        monkeypatch.setattr(registry, "read_json",
                            lambda path, **kw: (read.append(Path(path)), original(path, **kw))[1])
        again = Counting(jobs)
        assert _own_folder(_preflight(project, again))[0] == "failed"
        assert again.calls == Counter(user_jobs=1), again.calls
        assert not [p for p in read if p.parent.name.startswith("old-run")]  # ended runs are not even read
        assert [r["run_name"] for r in open_runs()] == ["live-run"]
    finally:
        jobs.cancel(live)
    wait_for(lambda: jobs.state(live).is_terminal, 30, what="the live job to end")
    after = Counting(jobs)
    assert _own_folder(_preflight(project, after))[0] == "passed"
    assert after.calls == Counter(user_jobs=1) and over_runs()[f"live-run-{live}"] == "CANCELLED"


def test_a_job_id_handed_out_again_is_a_new_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = _project(tmp_path, monkeypatch)
    _history(project, 1, "local")
    _preflight(project, LocalScheduler(tmp_path / "state" / "local-jobs"))
    assert "old-run-0-990000" in over_runs()
    create_run("old-run-0", "local", "990000")  # a cluster reset hands the id out again
    assert "old-run-0-990000" not in over_runs()


@pytest.mark.slurm
@pytest.mark.parametrize("history", [1, 60])
def test_on_slurm_a_launch_runs_one_squeue_whatever_the_history(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                slurm_cluster: None, history: int) -> None:
    from guarded_sbatch.scheduler import slurm, slurm_run

    project = _project(tmp_path, monkeypatch)
    _history(project, history, "slurm")
    commands: list[list[str]] = []
    original = slurm_run.run_command

    def counted(argv: list[str], **kwargs: object):  # type: ignore[no-untyped-def]
        commands.append(list(argv))
        return original(argv, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(slurm_run, "run_command", counted)
    report = _preflight(project, slurm.SlurmScheduler(state_dir=tmp_path / "state"))
    queries = [argv for argv in commands if argv[0] in ("squeue", "sacct", "scontrol")]
    assert [argv[0] for argv in queries] == ["squeue"], queries
    assert _own_folder(report)[0] == "passed" and len(over_runs()) == history
    commands.clear()
    _preflight(project, slurm.SlurmScheduler(state_dir=tmp_path / "state"))
    assert [argv[0] for argv in commands if argv[0] in ("squeue", "sacct", "scontrol")] == ["squeue"]
