"""A researcher's first hour, every screen telling the truth (issue 44), on real runs of the local backend and the dev
Slurm, read on an 80x24 pseudo-terminal where it is a screen: ELAPSED is the time the job has run (never its
--time limit), a guard STOP is the guard's from the moment the job ends, `restart` asks once, `show` says what no
evidence means and names a non-finite value and the STOP step as the evidence plot does, and `status` (long run
names), `--help`, the restart flow and `monitor --job` fit 80 columns with every shown command whole on one line."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from e2e_helpers import Project, make_project, submitted_job_id, wait_for
from guarded_sbatch.scheduler.local import LocalScheduler

TB = "runs/synthetic-tanh-mlp-bs64-lr5e-2"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def on_pty(project: Project, *args: str, answer: str | None = None, columns: int = 80, lines: int = 24,
           timeout: float = 240) -> tuple[int, list[str], int]:
    """The CLI with stdin, stdout and stderr on one pseudo-terminal of this size (COLUMNS/LINES set as a shell
    does); `answer` typed at each confirmation prompt. Returns the exit code, the screen's lines and the prompts."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", lines, columns, 0, 0))
    env = {**project.env, "COLUMNS": str(columns), "LINES": str(lines), "TERM": "xterm-256color"}
    proc = subprocess.Popen([sys.executable, "-m", "guarded_sbatch", *args], cwd=project.root, env=env,
                            stdin=slave, stdout=slave, stderr=slave, start_new_session=True)
    os.close(slave)
    out, prompts = b"", 0
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if not select.select([master], [], [], 1)[0]:
                if proc.poll() is not None:
                    break
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            out += data
            if out.rstrip(b" ").endswith(b"go ahead:"):
                prompts += 1
                if answer is not None:
                    os.write(master, answer.encode() + b"\n")
        else:
            raise AssertionError(f"{args} did not finish in {timeout} s:\n{out.decode(errors='replace')}")
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    text = ANSI.sub("", out.decode("utf-8", errors="replace")).replace("\r", "")
    return code, text.split("\n"), prompts


def too_wide(lines: list[str], width: int = 80) -> list[str]:
    """Lines wider than the terminal, but for a shell command alone on its line (copied whole, never split)."""
    return [f"{len(line)}: {line}" for line in lines
            if len(line) > width and not re.fullmatch(r"\W*`[^`]+`\W*", line.strip())]


def seconds(duration: str | None) -> int | None:
    """`4m10s`, `1h02m` as status writes them, in seconds."""
    if duration is None:
        return None
    match = re.fullmatch(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?", duration)
    assert match and duration, duration
    d, h, m, s = (int(g or 0) for g in match.groups())
    return ((d * 24 + h) * 60 + m) * 60 + s


def rows(project: Project) -> dict[str, dict]:
    return {r["job_id"]: r for r in json.loads(project.cli_here("status", "--json", check=True).stdout)["runs"]}


def test_elapsed_is_the_time_run_and_a_guard_stop_is_the_guards_at_once(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from guarded_sbatch.cli.lifecycle import run_status_row
    from guarded_sbatch.records.registry import list_runs
    from guarded_sbatch.sidecar.state import SidecarState

    # the evidence plot, drawn after the cancel, keeps the moment between the cancel and the sidecar's end (the one
    # this test reads status in) about a second long
    project = make_project(tmp_path, fast_interval=1.0, evidence_plot=True)
    # diverging ~9 s into training: the RUNNING row is read before the guard's stop, on a busy machine too
    result = project.cli("--guard-backend", "local", "--guard-tb", TB, "--time", "5:00", "train.sh", "--steps", "3000",
                         "--diverge-at", "300", "--step-seconds", "0.03")
    assert result.returncode == 0, result.stderr
    job_id = submitted_job_id(result.stdout)
    record = project.run_record(job_id)
    scheduler = LocalScheduler(project.state_dir / "local-jobs")
    wait_for(lambda: scheduler.state(job_id).value == "RUNNING", 120, what="the job to run")
    row = rows(project)[job_id]
    assert row["state"] == "RUNNING" and seconds(row["elapsed"]) < 60 <= 300, row  # not the 5:00 limit

    monkeypatch.setenv("GUARDED_SBATCH_STATE_DIR", project.env["GUARDED_SBATCH_STATE_DIR"])
    state_file = project.state_dir / "runs" / record["run_id"] / "sidecar-state.json"
    seen, before_finish = [], 0
    deadline = time.monotonic() + 180
    while not scheduler.state(record["sidecar_id"]).is_terminal and time.monotonic() < deadline:
        (run,) = [r for r in list_runs() if r.job_id == job_id]
        finished = SidecarState.load(run.sidecar_state_file).finished
        row = run_status_row(run)
        if row["state"] == "CANCELLED":
            seen.append((row["stopped_by"], row["decision"]))
            before_finish += not finished  # the moments the old status said `user (scancel)`, no decision
        time.sleep(0.05)
    assert seen and set(seen) == {("guard", "STOP")}, seen
    assert before_finish, f"no status read between the cancel and the sidecar's end ({state_file})"
    row = rows(project)[job_id]
    assert row["stopped_by"] == "guard" and seconds(row["elapsed"]) <= seconds(row["age"]), row


@pytest.mark.slurm
def test_slurm_elapsed_is_never_the_time_limit(tmp_path: Path, slurm_cluster: None) -> None:
    from guarded_sbatch.cli.lifecycle import elapsed
    from guarded_sbatch.scheduler.slurm import SlurmScheduler

    def sbatch(*extra: str) -> str:
        done = subprocess.run(["sbatch", "--parsable", "--time", "5:00", "-o", str(tmp_path / "%j.out"), *extra,
                               "--wrap", "sleep 120"], capture_output=True, text=True, timeout=60, check=True)
        return done.stdout.strip().split(";")[0]

    held, running = sbatch("--hold"), sbatch()
    scheduler = SlurmScheduler()
    try:
        wait_for(lambda: scheduler.info(running).state.value == "RUNNING", 120, what="the Slurm job to run")
        info = scheduler.info(running)
        assert info.end_time is None and info.start_time is not None and info.time_limit_s == 300, info
        ran = seconds(elapsed(info.state, info.start_time, info.end_time, time.time()))
        assert ran is not None and ran < 120, (ran, info)  # scontrol's EndTime is start + TimeLimit: never read
        pending = scheduler.info(held)
        assert pending.state.value == "PENDING" and pending.start_time is None and pending.end_time is None, pending
        assert elapsed(pending.state, pending.start_time, pending.end_time, time.time()) is None
    finally:
        subprocess.run(["scancel", held, running], timeout=60, check=False)


def test_restart_asks_once_and_its_flow_status_and_help_fit_80_columns(tmp_path: Path) -> None:
    project = make_project(tmp_path, fast_interval=1.0)
    name = f"{project.name}-seed1"  # the length the run-name check recommends: ~40 characters
    result = project.cli("--guard-backend", "local", "--guard-tb", TB, "--job-name", name, "train.sh", "--steps",
                         "5000", "--step-seconds", "0.05")
    assert result.returncode == 0, result.stderr
    job_id = submitted_job_id(result.stdout)
    new_job = None
    try:
        code, lines, prompts = on_pty(project, "restart", job_id, answer="yes")
        shown = "\n".join(lines)
        assert code == 0 and prompts == 1, shown  # one prompt in the flow
        assert "nothing to type" not in shown and " ".join(shown.split()).count("Type yes") == 1, shown
        assert not too_wide(lines), "\n".join(too_wide(lines))
        tails = [line for line in lines if "tail -f" in line]
        assert tails and all(re.search(r"`tail -f \S+`", line) for line in tails), tails  # the command whole
        new_job = re.search(r"restarted as job (\S+)", " ".join(shown.split())).group(1)  # type: ignore[union-attr]

        code, lines, _ = on_pty(project, "status")
        assert code == 0 and not too_wide(lines), "\n".join(too_wide(lines))
        header = lines[0].split()
        assert header[:2] == ["RUN", "JOB"], lines  # identifying columns stay; others go first
        assert any(line.split()[:2] == [name, new_job] for line in lines), lines

        code, lines, _ = on_pty(project, "--help")
        assert code == 0 and len(lines) > 40 and not too_wide(lines), "\n".join(too_wide(lines))
    finally:
        project.cli("kill", new_job or job_id, "--yes", timeout=180)


def test_monitor_job_fits_80_columns(tmp_path: Path) -> None:
    project = make_project(tmp_path, fast_interval=1.0)
    result = project.cli("--guard-backend", "local", "--guard-tb", TB, "train.sh", "--steps", "60",
                         "--step-seconds", "0.1")
    assert result.returncode == 0, result.stderr
    job_id = submitted_job_id(result.stdout)
    code, lines, _ = on_pty(project, "monitor", "--job", job_id, "--backend", "local", "--fast-interval", "1")
    shown = "\n".join(lines)
    assert code == 0 and "## Training Check" in shown, shown
    assert not too_wide(lines), "\n".join(too_wide(lines))


def test_show_tells_what_no_evidence_means_and_one_stop_step_and_first_bad_value(tmp_path: Path) -> None:
    from guarded_sbatch.actions.evidence_plot import (
        NONFINITE_KINDS, build_figure, nonfinite_onsets, onset_label, verdict_from_json,
    )

    healthy, broken = make_project(tmp_path / "h", fast_interval=1.0), make_project(tmp_path / "b", fast_interval=1.0)
    broken.env["GUARDED_SBATCH_STATE_DIR"] = healthy.env["GUARDED_SBATCH_STATE_DIR"]
    ok_job = submitted_job_id(healthy.cli("--guard-backend", "local", "--guard-tb", TB, "train.sh", "--steps", "40",
                                          "--step-seconds", "0.02", check=True).stdout)
    bad_job = submitted_job_id(broken.cli("--guard-backend", "local", "--guard-tb", TB, "train.sh", "--steps", "3000",
                                          "--diverge-at", "60", "--step-seconds", "0.02", check=True).stdout)
    scheduler = LocalScheduler(healthy.state_dir / "local-jobs")
    for project, job in ((healthy, ok_job), (broken, bad_job)):
        wait_for(lambda p=project, j=job: scheduler.state(p.run_record(j)["sidecar_id"]).is_terminal, 180,
                 what=f"the sidecar of job {job} to end")

    piped = healthy.cli_here("show", ok_job, check=True).stdout
    assert "COMPLETED" in piped.splitlines()[0] and "none yet" not in piped, piped
    assert re.search(r"Evidence: none: the run ended COMPLETED healthy", piped), piped

    shown = json.loads(broken.cli_here("show", bad_job, "--json", check=True).stdout)
    evidence = json.loads(Path(next(p for p in shown["evidence"] if p.endswith("evidence.json"))).read_text())
    stop = verdict_from_json(evidence["verdict"])
    assert shown["stopped_by"] == "guard" and shown["decision_now"] == "STOP", shown["reason_now"]
    assert shown["guard_stop_step"] == stop.last_step  # show --png draws this verdict: one STOP step
    assert not any(a.startswith("interrupted") for a in shown["anomalies"]), shown["anomalies"]  # its own cancel
    text = broken.cli_here("show", bad_job, check=True).stdout
    assert f"the guard's STOP at step {stop.last_step}" in text, text
    series = {k: (v["steps"], [float(x) for x in v["values"]]) for k, v in evidence["recent_metrics"].items()}
    figure = build_figure(series, stop, shown["run"])
    assert f"at step {stop.last_step}" in figure._suptitle.get_text()
    labels = {t.get_text() for ax in figure.axes for t in ax.texts}
    for anomaly in stop.anomalies:
        onsets = nonfinite_onsets(*series[anomaly.metric]) if anomaly.metric in series else []
        drawn = any(ax.get_visible() and anomaly.metric in ax.get_title() for ax in figure.axes)
        if anomaly.kind in NONFINITE_KINDS and onsets and drawn:  # the first bad value: one wording, text and plot
            first = onset_label(*onsets[0])
            assert first in labels and any(first in a for a in shown["anomalies"]), (first, labels, shown["anomalies"])


def test_monitor_job_watches_a_local_run_on_its_own_backend_whatever_the_default(tmp_path: Path) -> None:
    """A stranger's `monitor --job N` on a local run asked Slurm (the site's default) and reported on another job:
    the run's recorded backend decides when --backend is not given."""
    project = make_project(tmp_path, fast_interval=1.0)
    result = project.cli("--guard-backend", "local", "--guard-tb", TB, "train.sh", "--steps", "40",
                         "--step-seconds", "0.05")
    assert result.returncode == 0, result.stderr
    job_id = submitted_job_id(result.stdout)
    project.env["GUARDED_SBATCH_BACKEND"] = "slurm"
    watched = project.cli("monitor", "--job", job_id, "--fast-interval", "1", timeout=120)
    assert f"job {job_id} (local)" in watched.stderr + watched.stdout, watched.stderr[-2000:]
    assert "COMPLETED" in watched.stdout, watched.stdout[-2000:]


def test_every_commands_help_fits_80_columns_with_its_paragraphs_whole() -> None:
    from guarded_sbatch.cli.main import COMMANDS

    env = {**os.environ, "COLUMNS": "80"}
    for name in sorted(COMMANDS):
        shown = subprocess.run([sys.executable, "-m", "guarded_sbatch", name, "--help"], capture_output=True, text=True,
                               timeout=60, env=env, stdin=subprocess.DEVNULL)
        lines = shown.stdout.splitlines()
        assert shown.returncode == 0 and lines, (name, shown.stderr[-500:])
        assert not too_wide(lines), (name, too_wide(lines))
