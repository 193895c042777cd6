"""The README's install line as a new user follows it: `scripts/install BIN` links `guarded-sbatch` — and only it —
into a folder on PATH, so the user's own environment (first on PATH, with torch) stays the one their job runs; the
same launch from an environment that lacks torch is blocked by the pre-flight, naming the interpreter and the
module."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from test_preflight_interpreter import project, user_env

REPO = Path(__file__).resolve().parents[1]


def install(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "home" / ".local" / "bin"
    env = {**os.environ, "HOME": str(tmp_path / "home"), "GUARDED_SBATCH_VENV": str(Path(sys.executable).parents[1])}
    done = subprocess.run([str(REPO / "scripts" / "install")], env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in bin_dir.iterdir()) == ["guarded-sbatch"]  # the command alone, no python beside it
    assert (bin_dir / "guarded-sbatch").is_symlink()
    return bin_dir


def launch(root: Path, path: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in {"VIRTUAL_ENV", "PYTHONPATH"}}
    env.update(PATH=path, GUARDED_SBATCH_STATE_DIR=str(tmp_path / "state"), GUARDED_SBATCH_BACKEND="local",
               HOME=str(tmp_path / "home"))
    return subprocess.run(["guarded-sbatch", "--parsable", "--guard-waive", "config-diff=the first run of this project",
                           "train.sh"], cwd=root, env=env, capture_output=True, text=True, timeout=90, check=False)


def test_the_installed_command_runs_the_users_job_with_the_users_torch(tmp_path: Path) -> None:
    bin_dir = install(tmp_path)
    mine = user_env(tmp_path / "myenv", with_torch=True)
    root = project(tmp_path)
    done = launch(root, f"{mine / 'bin'}:{bin_dir}:/usr/bin:/bin", tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"the job runs {mine / 'bin' / 'python'}" in done.stderr
    out = root / f"slurm-{done.stdout.strip().splitlines()[-1]}.out"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (out.exists() and "trained" in out.read_text()):
        time.sleep(0.3)
    assert f"trained {mine}" in out.read_text(), out.read_text()  # the job's python is the user's environment


def test_an_environment_without_torch_is_blocked_naming_interpreter_and_module(tmp_path: Path) -> None:
    bin_dir = install(tmp_path)
    bare = user_env(tmp_path / "bare", with_torch=False)
    done = launch(project(tmp_path), f"{bare / 'bin'}:{bin_dir}:/usr/bin:/bin", tmp_path)
    assert done.returncode == 3, done.stderr
    assert f"the job's {bare / 'bin' / 'python'} cannot import torch (train.py line 1)" in done.stderr
    assert not done.stdout.strip()  # nothing submitted
