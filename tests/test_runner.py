"""core/runner.py, the one place that starts processes: run_command (waits, with a timeout), start_process (a
child that outlives the call, stopped by its owner) and replace_process (the shim's exec), on real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from guarded_sbatch.core.errors import CommandError
from guarded_sbatch.core.runner import StartedProcess, run_command, start_process


def _wait_exit(proc: StartedProcess, timeout_s: float = 10.0) -> int:
    deadline = time.monotonic() + timeout_s
    while (code := proc.poll()) is None:
        assert time.monotonic() < deadline, "the child did not end"
        time.sleep(0.02)
    return int(code)


def test_run_command_times_out_and_says_so() -> None:
    with pytest.raises(CommandError, match="did not answer in time") as caught:
        run_command(["sleep", "5"], timeout=0.2)
    assert caught.value.timed_out


def test_a_started_process_writes_to_its_files_in_its_own_session(tmp_path: Path) -> None:
    out, err = tmp_path / "out.log", tmp_path / "err.log"
    with out.open("ab") as stdout, err.open("ab") as stderr:
        proc = start_process([sys.executable, "-c", "import os,sys; print(os.getsid(0)); print('e', file=sys.stderr);"
                              "print(sys.stdin.read() == '')"], stdout=stdout, stderr=stderr)
    assert _wait_exit(proc) == 0
    sid, stdin_empty = out.read_text().split()
    assert int(sid) == proc.pid != os.getsid(0)  # its own session: a signal to its group reaches nothing of ours
    assert stdin_empty == "True" and err.read_text() == "e\n"


def test_stderr_can_join_stdout_and_output_defaults_to_nothing(tmp_path: Path) -> None:
    out = tmp_path / "both.log"
    with out.open("ab") as stdout:
        proc = start_process(["sh", "-c", "echo o; echo e >&2"], stdout=stdout, stderr_to_stdout=True)
    assert _wait_exit(proc) == 0 and out.read_text().split() == ["o", "e"]
    quiet = start_process(["sh", "-c", "echo nowhere; echo nowhere >&2"])
    assert _wait_exit(quiet) == 0 and quiet.returncode == 0


def test_stop_ends_a_child_that_ignores_sigterm_after_its_grace(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    proc = start_process([sys.executable, "-c", "import signal, time, pathlib; signal.signal(signal.SIGTERM, "
                          f"signal.SIG_IGN); pathlib.Path({str(ready)!r}).touch(); time.sleep(60)"])
    deadline = time.monotonic() + 20
    while not ready.exists():
        assert time.monotonic() < deadline and proc.poll() is None, "the child did not start"
        time.sleep(0.02)
    started = time.monotonic()
    proc.stop(grace_s=0.5)
    assert proc.returncode == -signal.SIGKILL
    assert time.monotonic() - started < 10
    proc.stop()  # a second stop of an ended child is a no-op


def test_a_missing_program_is_a_command_error_not_an_oserror(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="could not run"):
        start_process([str(tmp_path / "no-such-program")])


def test_replace_process_keeps_the_pid_stdio_and_exit_code(tmp_path: Path) -> None:
    child = ("import os, sys; print(os.getpid(), flush=True); from guarded_sbatch.core.runner import replace_process;"
             "replace_process(['/bin/sh', '-c', 'echo $$; read line; echo got $line; exit 7'])")
    result = subprocess.run([sys.executable, "-c", child], input="hello\n", capture_output=True, text=True,
                            timeout=30, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    before, after, got = result.stdout.splitlines()
    assert (before == after, got, result.returncode) == (True, "got hello", 7)


def test_replace_process_of_a_missing_program_raises(tmp_path: Path) -> None:
    from guarded_sbatch.core.runner import replace_process

    with pytest.raises(CommandError, match="could not run"):
        replace_process([str(tmp_path / "no-such-program")])
