"""The CLI run in-process (as click's CliRunner), for tests that only check its output and exit code.

`run_cli` calls `guarded_sbatch.cli.main.main(argv)` — the very function the console script and `python -m
guarded_sbatch` call — with the given environment, working folder and stdin, stdout and stderr captured apart, and a
SystemExit turned into its code; os.environ, the working folder, sys.std* and the logging handlers are restored after.
It returns a `subprocess.CompletedProcess[str]`, so a test written against `subprocess.run` reads the same.

Tests of the real console script (stdout discipline, `python -P`, exit codes of the process) stay subprocesses: see
test_cli_conventions.py. `wait_for` polls a condition instead of sleeping a fixed time.
"""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from guarded_sbatch.cli.main import main

class _Captured(io.StringIO):
    """A captured stream that says it is not a terminal (as a pipe would)."""

    def isatty(self) -> bool:
        return False


def run_cli(
    argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | Path | None = None, stdin: str = "",
    check: bool = False,
) -> subprocess.CompletedProcess[str]:
    """`guarded-sbatch ARGV` in this process. `env` replaces os.environ for the call (None: leave it as it is)."""
    saved_env = dict(os.environ)
    saved_cwd = os.getcwd()
    saved_streams = sys.stdin, sys.stdout, sys.stderr
    root = logging.getLogger()
    saved_handlers, saved_level = list(root.handlers), root.level
    out, err = _Captured(), _Captured()
    try:
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        if cwd is not None:
            os.chdir(cwd)
        sys.stdin, sys.stdout, sys.stderr = io.StringIO(stdin), out, err
        try:
            code = main(list(argv))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if exc.code is not None and not isinstance(exc.code, int):
                print(exc.code, file=err)
        out.flush()
        err.flush()
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved_streams
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)
    result = subprocess.CompletedProcess(["guarded-sbatch", *argv], int(code), out.getvalue(), err.getvalue())
    if check and result.returncode != 0:
        raise AssertionError(f"guarded-sbatch {list(argv)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return result

