"""The site's `job_umask`: every guarded job starts with it (the training job and its guard), whatever the user's own
umask, on the local backend and on the dev Slurm (sbatch hands the launching process's umask to the job); the
launching process keeps its own; a value outside the offered ones is refused in one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cli_runner import run_cli
from e2e_helpers import wait_for

SCRIPT = "#!/bin/bash\n#SBATCH --job-name=synthetic-umask-probe-bs1-lr1\necho \"job umask $(umask)\"\n"


def launch(tmp_path: Path, backend: str, umask_line: str) -> tuple[str, Path]:
    root = tmp_path / "proj"
    root.mkdir()
    (root / "probe.sh").write_text(SCRIPT, encoding="utf-8")
    config = tmp_path / "config.toml"
    config.write_text(umask_line, encoding="utf-8")
    env = {**os.environ, "GUARDED_SBATCH_STATE_DIR": str(tmp_path / "state"), "GUARDED_SBATCH_USER_CONFIG": str(config),
           "GUARDED_SBATCH_BACKEND": backend}
    env.pop("GUARDED_SBATCH_SITE_CONFIG", None)
    # the user's own umask is 002 (a shared project's): the site's 022 must win for the job
    argv = [sys.executable, "-c", "import os, runpy, sys; os.umask(0o002); sys.argv = ['guarded-sbatch', *sys.argv[1:]]; "
            "runpy.run_module('guarded_sbatch', run_name='__main__')", "--parsable",
            "--guard-waive", "monitoring=a probe", "--guard-waive", "config-diff=a probe", "probe.sh"]
    done = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True, timeout=90, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1], root


@pytest.mark.parametrize("backend", ["local", pytest.param("slurm", marks=pytest.mark.slurm)])
def test_every_guarded_job_starts_with_the_sites_umask(tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> None:
    if backend == "slurm":
        request.getfixturevalue("slurm_cluster")
    job, root = launch(tmp_path, backend, 'job_umask = "022"\n')
    out = root / f"slurm-{job}.out"
    wait_for(lambda: out.exists() and "job umask" in out.read_text(), 90, what="the probe job's output")
    assert "job umask 0022" in out.read_text()


def test_without_it_the_job_keeps_the_users_umask_and_a_bad_value_is_one_line(tmp_path: Path) -> None:
    job, root = launch(tmp_path, "local", "")
    out = root / f"slurm-{job}.out"
    wait_for(lambda: out.exists() and "job umask" in out.read_text(), 90, what="the probe job's output")
    assert "job umask 0002" in out.read_text()
    bad = tmp_path / "bad.toml"
    bad.write_text('job_umask = "000"\n', encoding="utf-8")
    done = run_cli(["check", "probe.sh"], cwd=root, env={**os.environ, "GUARDED_SBATCH_USER_CONFIG": str(bad)})
    assert done.returncode == 2 and "job_umask" in done.stderr and "Traceback" not in done.stderr, done.stderr
