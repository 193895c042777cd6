"""Under CI=true a test that needs Slurm fails when the cluster is missing; it never skips."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _run_probe(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    probe = tmp_path / "test_probe.py"
    probe.write_text("def test_needs_slurm(slurm_cluster):\n    pass\n", encoding="utf-8")
    shutil.copy(REPO / "tests" / "conftest.py", tmp_path / "conftest.py")
    bin_dir = tmp_path / "bin"  # a PATH without Slurm's commands
    bin_dir.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PATH"] = str(bin_dir)
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(probe)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )


def test_missing_cluster_fails_under_ci(tmp_path: Path) -> None:
    result = _run_probe(tmp_path, "true")
    assert result.returncode == 1, result.stdout
    assert "1 error" in result.stdout or "1 failed" in result.stdout
    assert "skipped" not in result.stdout
    assert "dev Slurm is not up under CI=true" in result.stdout


def test_missing_cluster_skips_outside_ci(tmp_path: Path) -> None:
    result = _run_probe(tmp_path, None)
    assert result.returncode == 0, result.stdout
    assert "1 skipped" in result.stdout
