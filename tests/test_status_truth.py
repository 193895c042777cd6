"""`status` tells the truth about how each run ended, from the records: real local-backend runs that
complete, crash by themselves, are killed live or killed after they completed; exit codes as sacct writes
them; ended runs stay listed with their end; --state / --name filters; on an 80-column pseudo-terminal
every line fits. `stop` on a target that is not there says nothing was stopped and exits non-zero."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from e2e_helpers import Project, make_project, submitted_job_id, wait_for
from guarded_sbatch.scheduler.local import LocalScheduler

CRASH = 'python -c "raise RuntimeError(\'the data loader died\')"\n'


def _projects(tmp_path: Path, names: list[str]) -> list[Project]:
    projects = [make_project(tmp_path / name, fast_interval=1.0) for name in names]
    for project in projects:  # one user, one state folder: status lists them all
        project.env["GUARDED_SBATCH_STATE_DIR"] = str(tmp_path / "state")
    return projects


def _launch(project: Project, *args: str) -> str:
    result = project.cli("--guard-backend", "local", "train.sh", *args)
    assert result.returncode == 0, result.stderr
    return submitted_job_id(result.stdout)


def _rows(project: Project, *extra: str) -> dict[str, dict]:
    rows = json.loads(project.cli_here("status", "--json", *extra, check=True).stdout)["runs"]
    return {row["job_id"]: row for row in rows}


def _status_on_pty(project: Project, columns: int) -> str:
    master, slave = pty.openpty()
    env = {**project.env, "COLUMNS": str(columns), "LINES": "40", "TERM": "xterm-256color"}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen([sys.executable, "-m", "guarded_sbatch", "status"], cwd=project.root, env=env,
                            stdout=slave, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    os.close(slave)
    chunks = []
    while select.select([master], [], [], 60)[0]:
        try:
            data = os.read(master, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    assert proc.wait(timeout=30) == 0, proc.stderr.read()  # type: ignore[union-attr]
    os.close(master)
    return b"".join(chunks).decode("utf-8", errors="replace")


def test_status_says_how_each_run_ended(tmp_path: Path) -> None:
    done, crashed, live = _projects(tmp_path, ["done", "crashed", "live"])
    script = crashed.root / "train.sh"
    script.write_text(script.read_text() + CRASH)  # trains a few steps, then dies by itself
    done_id = _launch(done, "--steps", "20", "--step-seconds", "0.01")
    crashed_id = _launch(crashed, "--steps", "20", "--step-seconds", "0.01")
    live_id = _launch(live, "--steps", "5000", "--step-seconds", "0.05")
    scheduler = LocalScheduler(tmp_path / "state" / "local-jobs")
    try:
        for job in (done_id, crashed_id):
            wait_for(lambda job=job: scheduler.state(job).is_terminal, 90, what=f"job {job} to end")
        wait_for(lambda: scheduler.state(live_id).value == "RUNNING", 60, what="the live job to run")
    finally:
        killed = live.cli("kill", live_id, "--yes")
    assert killed.returncode == 0, killed.stderr
    after_completion = done.cli("kill", done_id, "--yes")  # a kill of a run that had completed already
    assert after_completion.returncode == 1, after_completion.stderr  # nothing was stopped: it says so
    assert f"nothing stopped: run {done.name} (job {done_id}) had already ended (COMPLETED)" in after_completion.stderr

    rows = _rows(done)
    assert set(rows) >= {done_id, crashed_id, live_id}  # killed runs stay listed without --all
    assert rows[done_id]["state"] == "COMPLETED" and rows[done_id]["exit"] == "0:0"
    assert rows[done_id]["stopped_by"] is None and rows[done_id]["ended"] == "killed"
    assert rows[crashed_id]["state"] == "FAILED" and rows[crashed_id]["exit"] == "1:0"
    assert rows[crashed_id]["stopped_by"] == "itself (failed)"
    assert rows[live_id]["state"] == "CANCELLED" and rows[live_id]["stopped_by"] == "user (kill)"
    assert rows[live_id]["exit"] == "0:15" and rows[live_id]["exit_code"] == -15  # sacct's spelling; JSON as before
    assert all(rows[j]["ended_at"] for j in (done_id, crashed_id, live_id))

    assert set(_rows(done, "--state", "cancelled,failed")) == {crashed_id, live_id}
    assert set(_rows(done, "--name", f"{crashed.name}*")) == {crashed_id}
    typo = done.cli_here("status", "--state", "RUNING")
    assert typo.returncode == 2 and "did you mean RUNNING?" in typo.stderr and len(typo.stderr.splitlines()) == 1

    piped = done.cli_here("status", check=True).stdout.splitlines()
    assert piped[0].split()[:9] == ["RUN", "JOB", "STATE", "AGE", "ELAPSED", "EXIT", "STOPPED", "BY", "ENDED"]
    assert "\x1b[" not in "".join(piped) and any("0:15" in line and "user (kill)" in line for line in piped)

    screen = _status_on_pty(done, 80)
    lines = [line for line in screen.replace("\r", "").split("\n") if line]
    plain = [_strip_ansi(line) for line in lines]
    assert "\x1b[" in screen  # colours on a terminal
    assert max(len(line) for line in plain) <= 80, plain
    # the run names stay whole and the job ids stay (identifying columns go last): the exit code gives way first
    assert plain[0].split()[:3] == ["RUN", "JOB", "STATE"] and "STOPPED BY" in plain[0]
    # who stopped it, shortened to who (`user`, not `user (kill)`) before the column would go
    assert any(line.split()[0] == live.name and re.search(r"\buser\b", line) for line in plain), plain
    assert "status --json" in plain[-1]  # says which columns it left out and where they all are


def _strip_ansi(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def test_stop_of_nothing_says_so_and_fails(tmp_path: Path) -> None:
    (project,) = _projects(tmp_path, ["p"])
    for target in ("pid:999999", "tmux:no-such-session-here"):
        result = project.cli("stop", target, "--grace", "1")
        assert result.returncode == 1, (target, result.stderr)
        assert result.stderr.startswith("nothing stopped: ") and result.stdout == ""
    sleeper = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        result = project.cli("stop", f"pid:{sleeper.pid}", "--grace", "1")
        assert result.returncode == 0 and result.stderr.startswith(f"stopping pid:{sleeper.pid}: interrupt")
        assert result.stderr.splitlines()[-1].startswith("stopped: "), result.stderr
        assert sleeper.wait(timeout=10) == -2  # SIGINT first
    finally:
        sleeper.kill()
    assert "exit codes: 0 stopped" in project.cli_here("stop", "--help", check=True).stdout


@pytest.mark.slurm
def test_status_of_a_slurm_run_killed_by_its_owner(tmp_path: Path, slurm_cluster: None) -> None:
    (project,) = _projects(tmp_path, ["slurm"])
    result = project.cli("--guard-backend", "slurm", "train.sh", "--steps", "5000", "--step-seconds", "0.05")
    assert result.returncode == 0, result.stderr
    job_id = submitted_job_id(result.stdout)
    try:  # the shared dev Slurm may be busy: a queued job is killed the same way
        wait_for(lambda: _rows(project)[job_id]["state"] in ("RUNNING", "PENDING"), 60, what="the Slurm job")
        time.sleep(3)  # give it the chance to start
    finally:
        killed = project.cli("kill", job_id, "--yes", timeout=180)
    assert killed.returncode == 0, killed.stderr

    def accounted() -> dict[str, str]:
        sacct = subprocess.run(["sacct", "-j", job_id, "-n", "-P", "-o", "JobID,ExitCode"], capture_output=True,
                               text=True, timeout=30)
        return dict(line.split("|", 1) for line in sacct.stdout.split() if "|" in line)

    # slurmdbd records the batch step's end a moment after the job's: wait for it (a job that never started has none)
    try:
        lines = wait_for(lambda: (found := accounted()) and f"{job_id}.batch" in found and found, 30, 1, "the batch step")
    except AssertionError:
        lines = accounted()
    row = _rows(project)[job_id]
    assert row["state"] == "CANCELLED" and row["stopped_by"] == "user (kill)", row
    # accounting on: status writes what sacct writes for the batch script (the job's own line says 0:0 for a
    # cancelled job), or for the job when it never started
    written = lines.get(f"{job_id}.batch") or lines.get(job_id)
    if written:
        # while slurmctld still holds the job, status writes its scontrol ExitCode: Slurm 22.05 may record the batch
        # script's end as 15:0 there and 143:0 (its shell's status after a SIGTERM) here, or the other way round
        shown = subprocess.run(["scontrol", "-o", "show", "job", job_id], capture_output=True, text=True, timeout=30)
        held = re.search(r" ExitCode=(\d+:\d+)", shown.stdout)
        assert row["exit"] in {written, held.group(1) if held else written}, (row, lines, shown.stdout)
    assert re.fullmatch(r"\d+:\d+", row["exit"]), row
