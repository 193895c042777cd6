"""The "auto" backend and sbatch's own --help/--usage/--version, both run by scheduler/slurm.py (the one module
that runs Slurm's commands): the real sbatch where Slurm is installed, a failing or hanging one as the fault."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
from conftest import require
from guarded_sbatch.cli.launch import run_launch
from guarded_sbatch.scheduler import resolve_backend
from guarded_sbatch.scheduler.slurm import sbatch_answers, sbatch_pass_through


def _sbatch_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> None:
    fake = tmp_path / "bin" / "sbatch"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\n{body}\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}/usr/bin{os.pathsep}/bin")


def test_a_named_backend_is_kept() -> None:
    assert [resolve_backend(name) for name in ("slurm", "local")] == ["slurm", "local"]


def test_auto_is_slurm_where_the_real_sbatch_answers() -> None:
    require(shutil.which("sbatch") is not None, "Slurm's sbatch on PATH")
    assert resolve_backend("auto") == "slurm"


def test_auto_is_local_without_sbatch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert resolve_backend("auto") == "local"


def test_auto_is_local_when_sbatch_fails_or_hangs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _sbatch_on_path(tmp_path, monkeypatch, "echo 'sbatch: error: plugin broken' >&2; exit 1")
    assert resolve_backend("auto") == "local"
    (tmp_path / "bin" / "sbatch").write_text("#!/bin/sh\nexec sleep 30\n")
    started = time.monotonic()
    assert not sbatch_answers(timeout_s=0.5)
    assert time.monotonic() - started < 10


def test_sbatchs_information_options_reach_the_real_sbatch(capsys: pytest.CaptureFixture[str]) -> None:
    require(shutil.which("sbatch") is not None, "Slurm's sbatch on PATH")
    result = sbatch_pass_through(["--version"])
    assert result.returncode == 0 and result.stdout.startswith("slurm")
    assert run_launch(["--usage"], check_only=False, color=False) == 0  # `guarded-sbatch --usage`
    assert "Usage: sbatch" in capsys.readouterr().out


def test_a_yes_of_sbatch_is_remembered_while_it_is_the_same_file(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A loop of launches asks `sbatch --version` once: the answer holds while the binary is unchanged."""
    monkeypatch.setenv("GUARDED_SBATCH_STATE_DIR", str(tmp_path / "state"))
    asked = tmp_path / "asked"
    _sbatch_on_path(tmp_path, monkeypatch, f"echo x >> {asked}; echo 'slurm 22.05.8'")
    assert sbatch_answers() and sbatch_answers() and sbatch_answers()
    assert asked.read_text().count("x") == 1
    (tmp_path / "bin" / "sbatch").write_text(f"#!/bin/sh\necho x >> {asked}; echo 'plugin broken' >&2; exit 1\n")
    assert not sbatch_answers() and not sbatch_answers()  # another file: asked again, and a no is never kept
    assert asked.read_text().count("x") == 3
