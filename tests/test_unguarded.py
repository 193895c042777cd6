"""UNGUARDED: a run whose log the guard cannot read, or that has no source at all, is said to be unguarded — shown in
`status` and `show`, alerted once, its report naming what was seen and the one option that fixes it — and naming
that option (the loss key, the source) makes it guarded: a NaN then stops it. On the local backend and the dev Slurm.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from alert_servers import HOST, WebhookServer
from cli_runner import run_cli
from e2e_helpers import Project, make_project, submitted_job_id, wait_for
from guarded_sbatch.judge.history import MetricHistory
from guarded_sbatch.judge.ordered_checks import decide
from guarded_sbatch.judge.unguarded import likeliest_loss
from guarded_sbatch.judge.verdict import Decision, Reason
from guarded_sbatch.scheduler.interface import JobState
from guarded_sbatch.sidecar.unguarded_time import LAUNCH_FIXES, WATCH_FIXES, watched_verdict
from guarded_sbatch.sources.points import MetricPoint

TRAINER = Path(__file__).with_name("blind_trainer.py")
AFTER_S = 5  # sidecar.unguarded_after_seconds in these tests' config
TIMING_LINES = "".join(f"it {i * 10} | time {0.31 + 0.02 * (i * 3 % 4):.3f} | data {0.02 + 0.0025 * (i * 7 % 5):.3f}\n"
                       for i in range(1, 41))


def _history(series: dict[str, list[float]]) -> MetricHistory:
    history = MetricHistory()
    for index in range(max(len(v) for v in series.values())):
        history.add([MetricPoint((index + 1) * 10, 0.0, key, values[index]) for key, values in series.items()
                     if index < len(values)])
    return history


# --- the judge's words, and the watcher's time condition ----------------------------------------------------------


def test_a_one_shot_read_of_training_lines_without_a_loss_says_unguarded_and_names_the_key_option(tmp_path: Path) -> None:
    (tmp_path / "train.log").write_text(TIMING_LINES, encoding="utf-8")
    result = run_cli(["monitor", "--once", "--log", "train.log"], cwd=tmp_path)
    assert result.returncode == 10, result.stderr  # a WAIT, never a STOP, never CONTINUE healthy
    assert "WAIT step 400: unguarded: " in result.stdout
    assert "series seen: data, time" in result.stdout
    assert "name the loss with --train-loss-key KEY" in result.stdout  # timings are never the likeliest loss
    named = json.loads(run_cli(["monitor", "--once", "--json", "--log", "train.log", "--train-loss-key", "data"],
                               cwd=tmp_path).stdout)
    assert named["reason"] != "unguarded"  # the key named: judged


def test_the_likeliest_loss_is_a_lower_is_better_name_then_a_falling_series_never_a_timing() -> None:
    falling = [3.0 - 0.05 * i for i in range(20)]
    flat = [0.5] * 20
    assert likeliest_loss(_history({"ppl": falling, "wps": [12000.0 + i for i in range(20)], "lr": flat})) == "ppl"
    assert likeliest_loss(_history({"qq": falling, "zz": flat})) == "qq"
    assert likeliest_loss(_history({"time": falling, "data": flat, "eta": flat})) is None
    judged = decide(_history({"ppl": falling, "wps": flat, "lr": [3e-4] * 20}))
    assert judged.reason is not Reason.UNGUARDED  # an objective by its name and what it does: judged
    blind = decide(_history({"time": [0.3, 0.35, 0.31] * 7, "data": [0.02, 0.03, 0.025] * 7, "lr": [3e-4] * 21}))
    assert (blind.decision, blind.reason) == (Decision.WAIT, Reason.UNGUARDED)
    assert "series seen: data, lr, time" in blind.message and blind.message.endswith("--train-loss-key KEY")


def test_a_watched_run_is_unguarded_only_after_the_setting_and_names_its_own_options() -> None:
    lines = _history({"time": [0.3, 0.35, 0.31] * 5, "data": [0.02, 0.03, 0.025] * 5})
    judged = decide(lines)
    assert judged.reason is Reason.UNGUARDED

    def watched(history: MetricHistory, running_for: float | None, fixes=LAUNCH_FIXES):  # type: ignore[no-untyped-def]
        return watched_verdict(decide(history), history, running_for=running_for, after_s=AFTER_S, fixes=fixes,
                               where="slurm-7.out", found="no metric in slurm-7.out")

    early = watched(lines, 2.0)
    assert (early.decision, early.reason) == (Decision.WAIT, Reason.TOO_EARLY) and "unguarded if none" in early.message
    late = watched(lines, 60.0)
    assert (late.decision, late.reason) == (Decision.WAIT, Reason.UNGUARDED)
    assert "slurm-7.out has training lines" in late.message and late.message.endswith("--guard-loss-key KEY")
    assert watched(lines, 60.0, WATCH_FIXES).message.endswith("--train-loss-key KEY")  # monitor's own option
    nothing = watched(MetricHistory(), 60.0)
    assert nothing.reason is Reason.UNGUARDED and "no source: no metric in slurm-7.out" in nothing.message
    assert nothing.message.endswith("--guard-log FILE")
    assert watched(MetricHistory(), 2.0).reason is Reason.NO_DATA  # start-up
    with_loss = _history({"loss": [2.0 - 0.01 * i for i in range(20)]})
    assert watched(with_loss, 600.0).reason is Reason.HEALTHY  # a judged loss is never unguarded


# --- end to end: launched, shown, alerted once, fixed by naming the key or the source ------------------------------


BACKENDS = ["local", pytest.param("slurm", marks=[pytest.mark.slurm, pytest.mark.waits])]


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    if request.param == "slurm":
        request.getfixturevalue("slurm_cluster")
    return request.param


def _scheduler(project: Project, backend: str):  # type: ignore[no-untyped-def]
    if backend == "local":
        from guarded_sbatch.scheduler.local import LocalScheduler

        return LocalScheduler(project.state_dir / "local-jobs")
    from guarded_sbatch.scheduler.slurm import SlurmScheduler

    return SlurmScheduler(state_dir=project.root / ".slurm-cache")


def _project(tmp_path: Path, hook: WebhookServer) -> Project:
    project = make_project(tmp_path, fast_interval=1.0, job_poll=5.0)
    config = Path(project.env["GUARDED_SBATCH_USER_CONFIG"])
    config.write_text(config.read_text().replace("[sidecar]\n", f"[sidecar]\nunguarded_after_seconds = {AFTER_S}\n")
                      + f'\n[notify]\nurls = ["json://{HOST}:{hook.port}/alerts"]\n', encoding="utf-8")
    shutil.copy(TRAINER, project.root / TRAINER.name)
    (project.root / "blind.sh").write_text(
        f"#!/bin/bash\n#SBATCH --job-name={project.name}\n#SBATCH --time=00:10:00\n#SBATCH --mem=400M\n"
        f'cd "${{SLURM_SUBMIT_DIR:-.}}"\npython {TRAINER.name} "$@"\n', encoding="utf-8")
    return project


def _launch(project: Project, backend: str, *trainer: str, guard: tuple[str, ...] = ()) -> tuple[str, dict]:
    result = project.cli("--guard-backend", backend, "--guard-waive", "config-diff=a stand-in trainer", *guard,
                         "blind.sh", *trainer)
    assert result.returncode == 0, result.stderr
    job_id = submitted_job_id(result.stdout)
    return job_id, project.run_record(job_id)


def _row(project: Project, job_id: str) -> dict:
    rows = json.loads(project.cli_here("status", "--json", check=True).stdout)["runs"]
    return next(row for row in rows if row["job_id"] == job_id)


def _unguarded_everywhere(project: Project, job_id: str, hook: WebhookServer, *fragments: str) -> None:
    """Shown UNGUARDED in status (JSON and table) and show, each naming `fragments`; alerted."""
    # the reason may first be an earlier true one (no source yet, before the job's log is created): wait for this one
    row = wait_for(lambda: (r := _row(project, job_id))["reason"] == "unguarded"
                   and all(fragment in r["message"] for fragment in fragments) and r, 90, 1,
                   f"status to show job {job_id} unguarded, naming {fragments}")
    assert row["decision"] == "WAIT" and row["state"] == "RUNNING"
    assert all(fragment in row["message"] for fragment in fragments), row["message"]
    table = project.cli_here("status", check=True).stdout.splitlines()
    header, line = table[0], next(line for line in table if f"  {job_id}  " in line)
    assert line[header.index("DECISION"):].split()[0] == "UNGUARDED", table
    shown = project.cli_here("show", job_id, check=True).stdout
    assert re.search(r"judged now( at step \d+)?: UNGUARDED: ", shown) and all(fragment in shown for fragment in fragments), shown
    wait_for(lambda: hook.requests, 30, 0.5, "the unguarded alert")


def _ended(project: Project, backend: str, job_id: str, record: dict, *, cancel: bool = False) -> JobState:
    scheduler = _scheduler(project, backend)
    if cancel:
        scheduler.cancel(job_id)
    state = wait_for(lambda: (s := scheduler.state(job_id)).is_terminal and s, 150, 1, f"job {job_id} to end")
    wait_for(lambda: scheduler.state(record["sidecar_id"]).is_terminal, 90, 1, "its sidecar to end")
    return state


def _alerted_once(project: Project, job_id: str, hook: WebhookServer) -> dict:
    assert len(hook.requests) == 1, hook.requests
    assert project.sidecar_output(job_id).count("sidecar: alert (unguarded)") == 1
    posted = hook.requests[0]["json"]
    assert "NOT GUARDED" in posted["title"] and "unguarded" in posted["title"]
    return posted


def _stopped_on_the_nan(project: Project, backend: str, job_id: str, record: dict) -> None:
    assert _ended(project, backend, job_id, record) is JobState.CANCELLED
    evidence = project.state_dir / "runs" / record["run_id"] / "evidence" / "evidence.json"
    verdict = json.loads(evidence.read_text())["verdict"]
    assert (verdict["decision"], verdict["reason"]) == ("STOP", "non_finite_loss"), verdict
    output = project.sidecar_output(job_id)
    assert "- Reason: unguarded" not in output and "alert (unguarded)" not in output  # guarded from the start


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_a_log_without_a_readable_loss_is_unguarded_until_its_key_is_named(backend: str, tmp_path: Path) -> None:
    hook = WebhookServer().start()
    try:
        project = _project(tmp_path, hook)
        job_id, record = _launch(project, backend)  # `it 10 | time 0.370 | data 0.025`, for 100 s until cancelled
        assert record["watch"]["sidecar"]["unguarded_after_s"] == AFTER_S  # the setting travels in the run's record
        _unguarded_everywhere(project, job_id, hook, "has training lines", "series seen: data, time",
                              "name the loss with --guard-loss-key KEY")
        _ended(project, backend, job_id, record, cancel=True)
        posted = _alerted_once(project, job_id, hook)
        assert "series seen: data, time" in posted["message"] and "--guard-loss-key KEY" in posted["message"]

        fixed_id, fixed = _launch(project, backend, "--nan-at", "30", guard=("--guard-loss-key", "data"))
        assert fixed["judge"]["train_loss_key"] == "data"
        _stopped_on_the_nan(project, backend, fixed_id, fixed)
    finally:
        hook.stop()


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_a_run_with_no_source_is_unguarded_until_its_log_is_named(backend: str, tmp_path: Path) -> None:
    hook = WebhookServer().start()
    try:
        project = _project(tmp_path, hook)
        job_id, record = _launch(project, backend, "--silent")  # prints nothing, writes nothing
        _unguarded_everywhere(project, job_id, hook, "no source: ", "name where the run logs with --guard-log FILE")
        _ended(project, backend, job_id, record, cancel=True)
        assert "no source" in _alerted_once(project, job_id, hook)["message"]

        fixed_id, fixed = _launch(project, backend, "--to", "train.log", "--loss", "--nan-at", "30",
                                  guard=("--guard-log", "train.log"))
        _stopped_on_the_nan(project, backend, fixed_id, fixed)
    finally:
        hook.stop()
