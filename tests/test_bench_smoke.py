"""The benches still run against today's code: each one that needs no Slurm, at its smallest size, exits 0 and
prints its table. (A bench is not imported by the package or its tests otherwise; one had gone on building the
sidecar's start from the sbatch words the scheduler interface no longer carries, and failed only when run.)
The figures themselves are the benches' business, never asserted here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def run_bench(tmp_path: Path, name: str, *args: str, timeout: float = 240) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO / "wrapper"), "TMPDIR": str(tmp_path), "HOME": str(tmp_path),
           "XDG_STATE_HOME": str(tmp_path / "state"), "GUARDED_SBATCH_STATE_DIR": str(tmp_path / "guard-state")}
    done = subprocess.run([sys.executable, str(REPO / "bench" / name), *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done.stdout


@pytest.mark.waits  # the one watcher leaves at its cadence after the last task: half a minute of waiting
def test_the_array_watch_bench_runs_both_watchers(tmp_path: Path) -> None:
    out = run_bench(tmp_path, "bench_array_watch.py", "--tasks", "2", "--throttle", "2", "--lines", "2",
                    "--parallel", "2")
    assert "one array watcher" in out and "anchor: a sidecar per task" in out, out


def test_the_pre_flight_benches_run(tmp_path: Path) -> None:
    assert "own-folder check" in run_bench(tmp_path, "bench_own_folder.py", "--runs", "10", "--repeat", "1")
    assert "guarded-sbatch status" in run_bench(tmp_path, "bench_login.py", "--repeat", "1")
