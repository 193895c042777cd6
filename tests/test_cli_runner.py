"""The in-process CLI runner answers as the console script does, and leaves the test process as it found it."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

from cli_runner import run_cli


def test_in_process_answers_as_the_real_process_does(tmp_path: Path) -> None:
    env = {**os.environ, "GUARDED_SBATCH_STATE_DIR": str(tmp_path / "state")}
    env.pop("GUARDED_SBATCH_SITE_CONFIG", None)
    for argv in (["--version"], ["monitor", "--once"], ["status", "--state", "RUNING"], ["nosuch.sh"]):
        here = run_cli(argv, env=env, cwd=tmp_path)
        real = subprocess.run([sys.executable, "-m", "guarded_sbatch", *argv], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert (here.returncode, here.stdout, here.stderr) == (real.returncode, real.stdout, real.stderr), argv


def test_environment_folder_streams_and_logging_are_restored(tmp_path: Path) -> None:
    before = (dict(os.environ), os.getcwd(), sys.stdout, sys.stderr, sys.stdin, list(logging.getLogger().handlers))
    result = run_cli(["status", "--json"], env={**os.environ, "GUARDED_SBATCH_STATE_DIR": str(tmp_path / "state"),
                                                "ONLY_IN_THE_CALL": "1"}, cwd=tmp_path)
    assert result.returncode == 0 and result.stdout.startswith("{") and "ONLY_IN_THE_CALL" not in os.environ
    assert (dict(os.environ), os.getcwd(), sys.stdout, sys.stderr, sys.stdin,
            list(logging.getLogger().handlers)) == before
