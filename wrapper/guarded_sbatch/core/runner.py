"""The one place that starts subprocesses: argument lists, never a shell. A call that waits for its child
(run_command) always has a timeout; a child that outlives the call (start_process) is polled and stopped by its
owner; replace_process is the exec of a hand-over (the sbatch shim)."""

from __future__ import annotations

import os
import select
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO, NoReturn

from guarded_sbatch.core import door
from guarded_sbatch.core.errors import CommandError

DEFAULT_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class CommandResult:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str


def run_command(
    argv: Sequence[str],
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    input_text: str | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    check: bool = True,
) -> CommandResult:
    """Run argv and return its output; raise CommandError on failure or timeout (when check)."""
    args = [os.fspath(a) for a in argv]
    try:
        proc = subprocess.run(
            args,
            input=input_text,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            stdin=None if input_text is not None else subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        raise CommandError(args, None, stderr, timed_out=True) from None
    except OSError as exc:
        raise CommandError(args, None, str(exc)) from None
    result = CommandResult(args, proc.returncode, proc.stdout, proc.stderr)
    if check and proc.returncode != 0:
        raise CommandError(args, proc.returncode, proc.stderr or proc.stdout)
    return result


def run_command_tail(argv: Sequence[str], *, timeout: float, max_bytes: int) -> tuple[CommandResult, int]:
    """Run argv and keep only the last max_bytes of its stdout (64 KB of its stderr), whatever it prints (a
    `tail -n 100` of a log with a 3 GB hole prints 3 GB): (its result, how many bytes were dropped from the
    front). CommandError on failure or timeout, as run_command."""
    args = [os.fspath(a) for a in argv]
    try:
        with door.anonymous_file() as errors:
            proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=errors)
            kept, dropped, finished = _read_tail(proc, max_bytes, time.monotonic() + timeout)
            errors.seek(0)
            stderr = errors.read(65536).decode(errors="replace")
    except OSError as exc:
        raise CommandError(args, None, str(exc)) from None
    if not finished:
        raise CommandError(args, None, stderr, timed_out=True)
    if proc.returncode != 0:
        raise CommandError(args, proc.returncode, stderr)
    return CommandResult(args, proc.returncode, kept.decode(errors="replace"), stderr), dropped


def _read_tail(proc: subprocess.Popen[bytes], max_bytes: int, deadline: float) -> tuple[bytes, int, bool]:
    """The last max_bytes of proc's stdout, how many bytes before them were dropped, and whether proc ended
    before the deadline (else it is killed)."""
    assert proc.stdout is not None
    kept, dropped, fd = bytearray(), 0, proc.stdout.fileno()
    finished = True
    with proc.stdout:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                finished = False
                break
            piece = os.read(fd, 1 << 20)
            if not piece:
                break
            kept += piece
            if len(kept) > 2 * max_bytes:
                dropped += len(kept) - max_bytes
                del kept[: len(kept) - max_bytes]
    try:
        proc.wait(max(0.1, deadline - time.monotonic()) if finished else 0.01)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        finished = False
    if len(kept) > max_bytes:
        dropped += len(kept) - max_bytes
        del kept[: len(kept) - max_bytes]
    return bytes(kept), dropped, finished


class StartedProcess:
    """A child that outlives the call that started it (a detached job supervisor, a job, a watch step): no
    timeout at the start, so its owner polls it and ends it (`stop`, which never waits more than grace_s)."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self._proc = proc

    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode

    def poll(self) -> int | None:
        return self._proc.poll()

    def stop(self, grace_s: float = 5.0) -> None:
        """SIGTERM, then SIGKILL when it is still there after grace_s."""
        if self._proc.poll() is not None:
            return
        self._proc.terminate()
        try:
            self._proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(timeout=grace_s)


def start_process(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    stdout: IO[bytes] | None = None,
    stderr: IO[bytes] | None = None,
    stderr_to_stdout: bool = False,
    new_session: bool = True,
) -> StartedProcess:
    """Start argv (no shell, stdin from /dev/null) and return at once; output to the given files, else /dev/null.

    Raises CommandError when it cannot be started."""
    args = [os.fspath(a) for a in argv]
    try:
        proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=stdout if stdout is not None else subprocess.DEVNULL,
            stderr=subprocess.STDOUT if stderr_to_stdout else (stderr if stderr is not None else subprocess.DEVNULL),
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=new_session,
        )
    except OSError as exc:
        raise CommandError(args, None, str(exc)) from None
    return StartedProcess(proc)


def replace_process(argv: Sequence[str]) -> NoReturn:
    """Become argv (exec): same pid, stdin, stdout, stderr and exit code; for a hand-over that must be invisible."""
    args = [os.fspath(a) for a in argv]
    try:
        os.execv(args[0], args)
    except OSError as exc:
        raise CommandError(args, None, str(exc)) from None
