"""`guarded-sbatch run -- COMMAND`: the pre-flight on the command line itself, then the run under the guard
(in a real tmux session, or as a local process group), visible to status and kill like a Slurm job."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from e2e_helpers import make_project, wait_for
from guarded_sbatch.scheduler.local import LocalScheduler

CONFIG = "configs/synthetic-tanh-mlp.yaml"


def _project(tmp_path: Path, *, history: bool = False):  # type: ignore[no-untyped-def]
    project = make_project(tmp_path, history=history)
    project.env["TMUX_TMPDIR"] = str(tmp_path)
    return project


def _runs(project) -> list[dict]:  # type: ignore[no-untyped-def]
    return [json.loads(p.read_text()) for p in (project.state_dir / "runs").glob("*/run.json")]


def _status(project, run_id: str) -> dict:  # type: ignore[no-untyped-def]
    rows = json.loads(project.cli_here("status", "--json", check=True).stdout)["runs"]
    return next(row for row in rows if row["run_id"] == run_id)


def test_run_blocks_a_bad_command_line_and_starts_nothing(tmp_path: Path) -> None:
    project = _project(tmp_path, history=True)
    history = _runs(project)  # the project's baseline, a run that finished healthy: its reference
    result = project.cli(
        "run", "--guard-run-name", "bs256", "--", "python", "train.py", "--config", CONFIG, "--batch-size", "256"
    )
    assert result.returncode == 3, result.stderr
    assert "[FAIL] config-diff: global batch 64 -> 256 (×4) but the learning rate was not rescaled" in result.stderr
    assert "BLOCKED by: config-diff" in result.stderr and "nothing was started" in result.stderr
    assert result.stdout == "" and _runs(project) == history
    # the launcher's own options count: torchrun's processes make the global batch
    torchrun = project.cli(
        "run",
        "--guard-run-name",
        "synthetic-regression-tanh-mlp-bs64-lr0.05",
        "--",
        "torchrun",
        "--nproc_per_node",
        "2",
        "train.py",
        "--config",
        CONFIG,
        "--batch-size",
        "128",
    )
    assert torchrun.returncode == 3, torchrun.stderr
    assert "× 2 process(es) per node (torchrun) × accumulation 1 = global 256" in torchrun.stderr
    assert "the learning rate was not rescaled" in torchrun.stderr and _runs(project) == history


def test_run_in_tmux_is_watched_and_stopped_when_it_diverges(tmp_path: Path) -> None:
    project = _project(tmp_path)
    session = "gs-run-test"
    try:
        result = project.cli(
            "run",
            "--guard-run-name",
            "synthetic-regression-tanh-mlp-bs64-lr0.05",
            "--guard-tmux",
            session,
            "--",
            "python",
            "train.py",
            "--config",
            CONFIG,
            "--steps",
            "3000",
            "--diverge-at",
            "60",
        )
        assert result.returncode == 0, result.stderr
        assert "Clear: submitting now." in result.stderr and f"tmux session {session}" in result.stderr
        assert "To submit it, run:" not in result.stderr  # it runs: no command to copy
        job_id = result.stdout.strip()
        record = next(r for r in _runs(project) if r["job_id"] == job_id)
        assert record["launched_by"] == "run" and record["backend"] == "local"
        assert record["script"] == "python" and record["script_args"][:1] == ["train.py"]  # the command, not "--"
        scheduler = LocalScheduler(project.state_dir / "local-jobs")
        wait_for(lambda: scheduler.state(job_id).is_terminal, 180, what="the tmux run to be stopped")
        wait_for(lambda: scheduler.state(record["sidecar_id"]).is_terminal, 60, what="its watcher to exit")
        output = project.sidecar_output(job_id)
        assert "- Decision: STOP" in output and "sidecar: stop done" in output, output
        assert f"guarded_sbatch stop tmux:{session}" in output  # the watcher stopped the session, and the job ended
        has = subprocess.run(["tmux", "has-session", "-t", f"={session}"], env=project.env, timeout=30, check=False)
        assert has.returncode != 0  # the session is gone
        row = _status(project, record["run_id"])
        assert row["decision"] == "STOP" and row["state"] in ("FAILED", "CANCELLED", "COMPLETED")
        assert row["stopped_by"] == "guard"  # its watcher's stop command is the guard's, not the user's
    finally:
        subprocess.run(["tmux", "kill-server"], env=project.env, timeout=30, capture_output=True, check=False)


def test_a_tmux_run_stopped_by_hand_is_recorded_as_the_users(tmp_path: Path) -> None:
    project = _project(tmp_path)
    session = f"gs-stop-{tmp_path.name[-6:]}".replace("_", "-")
    try:
        result = project.cli("run", "--guard-run-name", "synthetic-regression-tanh-mlp-bs64-lr0.05", "--guard-tmux",
                             session, "--", "python", "train.py", "--config", CONFIG, "--steps", "100000")
        assert result.returncode == 0, result.stderr
        job_id = result.stdout.strip()
        record = next(r for r in _runs(project) if r["job_id"] == job_id)
        wait_for(lambda: _status(project, record["run_id"])["last_step"], 120, what="the run to log")
        stopped = project.cli("stop", f"tmux:{session}", "--grace", "2")
        assert stopped.returncode == 0 and stopped.stderr.splitlines()[-1].startswith("stopped: "), stopped.stderr
        assert f"run {record['run_name']} (job {job_id})" in stopped.stderr
        scheduler = LocalScheduler(project.state_dir / "local-jobs")
        wait_for(lambda: scheduler.state(job_id).is_terminal, 60, what="the run's job to end with its session")
        row = _status(project, record["run_id"])
        assert row["stopped_by"] == f"user (stop tmux:{session})", row
        again = project.cli("stop", f"tmux:{session}", "--grace", "1")
        assert again.returncode == 1 and again.stderr.startswith("nothing stopped: "), again.stderr
    finally:
        subprocess.run(["tmux", "kill-session", "-t", f"={session}"], env=project.env, timeout=30, capture_output=True,
                       check=False)


def test_run_as_a_local_process_shows_in_status_and_is_killed(tmp_path: Path) -> None:
    project = _project(tmp_path)
    result = project.cli(
        "run",
        "--guard-run-name",
        "synthetic-regression-tanh-mlp-bs64-lr0.05",
        "--",
        "python",
        "train.py",
        "--config",
        CONFIG,
        "--steps",
        "100000",
    )
    assert result.returncode == 0, result.stderr
    job_id = result.stdout.strip()
    record = next(r for r in _runs(project) if r["job_id"] == job_id)
    wait_for(lambda: _status(project, record["run_id"])["decision"] == "CONTINUE", 120, what="a healthy verdict")
    assert _status(project, record["run_id"])["state"] == "RUNNING"
    killed = project.cli("kill", record["run_id"], "--yes")
    assert killed.returncode == 0, killed.stderr
    scheduler = LocalScheduler(project.state_dir / "local-jobs")
    assert scheduler.state(job_id).value == "CANCELLED"


def test_tmux_run_restarts_in_a_fresh_session_and_is_killed(tmp_path: Path) -> None:
    project = _project(tmp_path)
    session = "gs-restart-test"
    try:
        result = project.cli(
            "run",
            "--guard-run-name",
            "synthetic-regression-tanh-mlp-bs64-lr0.05",
            "--guard-tmux",
            session,
            "--",
            "python",
            "train.py",
            "--config",
            CONFIG,
            "--steps",
            "100000",
        )
        assert result.returncode == 0, result.stderr
        old = next(r for r in _runs(project) if r["job_id"] == result.stdout.strip())
        wait_for(lambda: _status(project, old["run_id"])["decision"] == "CONTINUE", 120, what="a healthy verdict")
        restarted = project.cli("restart", old["run_id"], "--yes")
        assert restarted.returncode == 0, restarted.stderr
        new = next(r for r in _runs(project) if r.get("restarted_from") == old["run_id"])
        assert new["launched_by"] == "run" and new["log_paths"] == []  # not the old session's log
        # the new tmux session starts its job a moment after restart returns (PENDING until then)
        wait_for(lambda: _status(project, new["run_id"])["state"] == "RUNNING", 60, what="the restarted run running")
        assert LocalScheduler(project.state_dir / "local-jobs").state(old["job_id"]).value == "CANCELLED"

        def has() -> bool:
            return (
                subprocess.run(["tmux", "has-session", "-t", f"={session}"], env=project.env, timeout=30, check=False).returncode
                == 0
            )

        wait_for(has, 30, what="the new run's session, under the same name (its job starts it once running)")
        killed = project.cli("kill", new["run_id"], "--yes")
        assert killed.returncode == 0, killed.stderr
        wait_for(lambda: not has(), 60, what="the session to be gone after kill")
    finally:
        subprocess.run(["tmux", "kill-server"], env=project.env, timeout=30, capture_output=True, check=False)
