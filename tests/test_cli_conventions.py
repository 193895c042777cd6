"""CLI conventions: --help on every subcommand, typo suggestions, our options before the script (a clear exit 2
after it), --json only where it applies, the one-line `monitor --once`, the launch wording, and a restart that
prints its pre-flight once."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from e2e_helpers import EXAMPLE, make_project, submitted_job_id, wait_for
from guarded_sbatch.scheduler.local import LocalScheduler

TB = "runs/synthetic-tanh-mlp-bs64-lr5e-2"


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    return make_project(tmp_path_factory.mktemp("cli"))


def _one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


@pytest.mark.parametrize("command", ["check", "monitor", "status", "kill", "restart", "show"])
def test_every_subcommand_has_help(project, command: str) -> None:  # type: ignore[no-untyped-def]
    result = project.cli(command, "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: guarded-sbatch {command}"), result.stdout


@pytest.mark.parametrize(("typo", "meant"), [("stauts", "status"), ("chekc", "check"), ("restrat", "restart"),
                                             ("mointor", "monitor")])
def test_a_typo_gets_a_suggestion(project, typo: str, meant: str) -> None:  # type: ignore[no-untyped-def]
    line = _one_error_line(project.cli(typo))
    assert f"did you mean `guarded-sbatch {meant}`?" in line


@pytest.mark.parametrize(("args", "fragment"), [
    (["check", "train.sh", "--json"], "--json comes after the script train.sh"),
    (["check", "train.sh", "--guard-waive", "eta=x"], "--guard-waive comes after the script"),
    (["train.sh", "--guard-tb", "runs/x"], "--guard-tb comes after the script"),
    (["--json", "train.sh"], "--json applies to `guarded-sbatch check` only"),
    (["monitor", "--json", "--tb", "runs"], "monitor --json needs --once"),
    (["kill", "some-run", "--json"], "has no --json output"),
    (["restart", "some-run", "--json"], "has no --json output"),
])
def test_misplaced_options_are_a_clear_usage_error(project, args: list[str], fragment: str) -> None:  # type: ignore[no-untyped-def]
    assert fragment in _one_error_line(project.cli(*args))


def test_json_before_the_script_prints_the_report_as_json(project) -> None:  # type: ignore[no-untyped-def]
    result = project.cli("check", "--json", "--guard-backend", "local", "--guard-waive", "eta=tests",
                         "--guard-tb", TB, "train.sh", "--steps", "10")
    assert result.returncode in (0, 3), result.stderr
    payload = json.loads(result.stdout)
    assert {r["name"] for r in payload["checks"]} >= {"run-name", "paths", "eta"}
    if result.returncode == 0:
        assert "Clear to launch" in result.stderr and "To submit it, run:" in result.stderr


def test_monitor_once_is_one_line_with_step_loss_and_reason(tmp_path: Path) -> None:
    config = str(EXAMPLE / "configs" / "synthetic-tanh-mlp.yaml")
    subprocess.run([sys.executable, str(EXAMPLE / "train.py"), "--config", config,
                    "--logdir", str(tmp_path / "runs" / "a"), "--step-seconds", "0", "--steps", "300"],
                   check=True, timeout=120, capture_output=True)
    result = subprocess.run([sys.executable, "-m", "guarded_sbatch", "monitor", "--once", "--tb", "runs/a"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr  # 0: CONTINUE
    lines = result.stdout.splitlines()
    assert len(lines) == 1, lines
    line = lines[0]
    assert line.startswith("CONTINUE step 300 ") and "train/loss=" in line and "[tensorboard_ok]" in line, line
    assert "healthy (healthy)" not in line and line.count("healthy") == 1


def test_restart_prints_the_preflight_once(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    launched = project.cli("--guard-backend", "local", "--guard-tb", TB, "train.sh", "--steps", "5000",
                           "--step-seconds", "0.05")
    assert launched.returncode == 0, launched.stderr
    job_id = submitted_job_id(launched.stdout)
    restarted = project.cli("restart", job_id, "--yes", timeout=180)
    assert restarted.returncode == 0, restarted.stderr
    assert restarted.stderr.count("## Pre-flight") == 1, restarted.stderr
    assert "relaunching (the pre-flight above passed" in restarted.stderr
    new_job = restarted.stdout.split()[-1]
    LocalScheduler(project.state_dir / "local-jobs").cancel(new_job)
    wait_for(lambda: LocalScheduler(project.state_dir / "local-jobs").state(new_job).is_terminal, 60)
