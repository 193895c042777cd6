"""A first word that is neither a subcommand nor a batch script file is an unknown command: one line naming the
commands, exit 2 (`guarded-sbatch logs 5` in a project with a logs/ folder is not a missing batch script)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_runner import run_cli

COMMANDS = "the commands are check, monitor, show, status, kill, restart, admin, run, check-sweep, stop, reference"


def _one_error_line(argv: list[str], cwd: Path) -> str:
    result = run_cli(argv, cwd=cwd)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1 and result.stdout == "", result
    return lines[0]


@pytest.mark.parametrize("word", ["logs", "logs/", "tail"])  # a folder of the project; a name with no file
def test_a_word_that_is_no_command_and_no_script_is_an_unknown_command(tmp_path: Path, word: str) -> None:
    (tmp_path / "logs").mkdir()
    line = _one_error_line([word, "5"], tmp_path)
    assert line == (f"guarded-sbatch: error: unknown command {word!r}; {COMMANDS} "
                    "(or give the batch script to submit)")


def test_a_near_miss_names_the_command_meant(tmp_path: Path) -> None:
    line = _one_error_line(["stauts"], tmp_path)
    assert line.startswith("guarded-sbatch: error: unknown command 'stauts' (did you mean `guarded-sbatch status`?); ")


def test_a_missing_script_path_is_still_named_as_the_script(tmp_path: Path) -> None:
    line = _one_error_line(["train.sh"], tmp_path)
    assert "batch script train.sh not found" in line and "unknown command" not in line
