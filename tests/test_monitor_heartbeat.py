"""`monitor` shows it is watching between its reports: a heartbeat line (the time, the step, the decision) after a
poll that printed nothing else, at most every few seconds, on a terminal or when asked; into a pipe, only when
asked. A real trainer writes the log; the monitor is a real process, on a pipe and on a pseudo-terminal."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

from e2e_helpers import make_project
from guarded_sbatch.cli.monitor_live import HEARTBEAT_S

TRAINER = """import sys, time
with open(sys.argv[1], "w") as log:
    for step in range(1, 400):
        log.write(f"step {step} loss {2.0 / (1 + step / 50):.5f} lr 1e-3\\n")
        log.flush()
        time.sleep(0.1)
"""
HEARTBEAT = re.compile(r"^\s+\d\d:\d\d:\d\d\s+step \d+\s+(CONTINUE|WAIT|STOP) \w+")


def _watch(tmp_path: Path, *flags: str, seconds: float = 12.0, terminal: bool = False,
           quiet_after_report: float | None = None) -> list[str]:
    """The monitor's lines until 3 heartbeats and a report came (or `seconds`); with `quiet_after_report`, until a
    report came and that many seconds more passed (a window in which no heartbeat may come)."""
    project = make_project(tmp_path)
    log = tmp_path / "train.log"
    trainer = subprocess.Popen([sys.executable, "-c", TRAINER, str(log)])
    command = [sys.executable, "-m", "guarded_sbatch", "monitor", "--log", str(log), "--fast-interval", "1",
               "--state-dir", str(tmp_path / "watch"), *flags]
    lines: list[str] = []
    if terminal:
        leader, follower = pty.openpty()
        env = {**project.env, "COLUMNS": "60"}
        monitor = subprocess.Popen(command, cwd=project.root, env=env, stdout=follower, stderr=subprocess.DEVNULL,
                                   stdin=subprocess.DEVNULL)
        os.close(follower)
        reader = threading.Thread(target=_read_pty, args=(leader, lines), daemon=True)
    else:
        monitor = subprocess.Popen(command, cwd=project.root, env=project.env, stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True)
        reader = threading.Thread(target=lambda: lines.extend(line.rstrip("\n") for line in monitor.stdout),  # type: ignore[union-attr]
                                  daemon=True)
    reader.start()
    deadline = time.monotonic() + seconds
    reported_at: float | None = None
    try:
        while time.monotonic() < deadline:
            if reported_at is None and any("Decision" in line for line in lines):
                reported_at = time.monotonic()
            if quiet_after_report is None and reported_at is not None and \
                    sum(bool(HEARTBEAT.match(line)) for line in lines) >= 3:
                break
            if quiet_after_report is not None and reported_at is not None and \
                    time.monotonic() - reported_at >= quiet_after_report:
                break
            time.sleep(0.2)
    finally:
        monitor.terminate()
        trainer.terminate()
        monitor.wait(timeout=30)
        trainer.wait(timeout=30)
    reader.join(timeout=5)
    return lines


def _read_pty(fd: int, lines: list[str]) -> None:
    buffer = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        buffer += chunk
        *whole, buffer = buffer.split(b"\n")
        lines.extend(part.decode(errors="replace").rstrip("\r") for part in whole)


def test_asked_on_a_pipe_it_beats_between_reports(tmp_path: Path) -> None:
    lines = _watch(tmp_path, "--heartbeat", seconds=60)
    beats = [line for line in lines if HEARTBEAT.match(line)]
    assert len(beats) >= 3, lines
    clock = [int(h) * 3600 + int(m) * 60 + int(s) for h, m, s in (line.split()[0].split(":") for line in beats)]
    assert all((b - a) % 86400 >= HEARTBEAT_S - 1 for a, b in zip(clock, clock[1:])), beats  # at most every few s
    steps = [int(line.split()[2]) for line in beats]
    assert steps[-1] > steps[0]  # each says the step the run is at


def test_a_pipe_gets_no_heartbeat_unless_asked(tmp_path: Path) -> None:
    lines = _watch(tmp_path, seconds=90, quiet_after_report=2 * HEARTBEAT_S + 2)
    assert any("Decision" in line for line in lines), lines  # the reports come
    assert not any(HEARTBEAT.match(line) for line in lines), lines


def test_a_terminal_gets_it_fitted_to_its_width(tmp_path: Path) -> None:
    lines = _watch(tmp_path, terminal=True, seconds=60)
    assert sum(bool(HEARTBEAT.match(line)) for line in lines) >= 3, lines
    assert all(len(line) <= 60 for line in lines if HEARTBEAT.match(line)), lines
