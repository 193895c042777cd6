"""Messages as a user meets them, through the real CLI: every error one line that says what is wrong and
what to do; "did you mean" for sbatch options, guard options, config keys, check names and states; a config
path that is missing or a folder says so; the run-name rule is stated; a path with "secret" in it is shown,
not masked."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from e2e_helpers import Project, make_project


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return make_project(tmp_path)


def _error(project: Project, *args: str, code: int = 2) -> str:
    result = project.cli_here(*args)
    assert result.returncode == code, (args, result.returncode, result.stderr)
    assert "Traceback" not in result.stderr
    if code == 2:
        assert result.stderr.count("\n") == 1, result.stderr  # one line
        assert result.stderr.startswith("guarded-sbatch: error: ")
    return result.stderr


@pytest.mark.parametrize(("args", "expected"), [
    (["--nodse", "2", "train.sh"], "did you mean --nodes?"),
    (["--tiem=01:00:00", "train.sh"], None),  # a value given with '=': sbatch may know it; passed on, not guessed
    (["--guard-wiave", "eta=x", "train.sh"], "did you mean --guard-waive?"),
    (["--guard-waive", "run-nmae=because", "train.sh"], "did you mean run-name?"),
    (["status", "--state", "RUNING"], "did you mean RUNNING?"),
    (["nosuch.sh"], "batch script nosuch.sh not found (relative to the folder you submit from, "),
    (["check-sweep", "nosuch.yaml"], "sweep config nosuch.yaml not found (relative to "),
])
def test_did_you_mean(project: Project, args: list[str], expected: str | None) -> None:
    if expected is None:
        result = project.cli_here("check", "--guard-backend", "local", *args)
        assert "did you mean" not in result.stderr
        return
    assert expected in _error(project, *args)


def test_a_mistyped_script_name_suggests_the_script_of_the_folder(project: Project) -> None:
    """`check trian.sh` beside train.sh: the one line names train.sh, found in the user's own folder only."""
    for command in (["check"], []):
        text = _error(project, *command, "trian.sh")
        assert "did you mean train.sh?" in text and "check the path" not in text
    nothing_near = _error(project, "check", "zzzz.sh")
    assert "did you mean" not in nothing_near and "check the path" in nothing_near


def test_did_you_mean_for_config_keys_and_check_names(project: Project, tmp_path: Path) -> None:
    config = Path(project.env["GUARDED_SBATCH_USER_CONFIG"])
    config.write_text(config.read_text().replace("fast_interval_seconds", "fast_intervall_seconds"))
    assert "did you mean sidecar.fast_interval_seconds?" in _error(project, "check", "train.sh")
    config.write_text(config.read_text().replace("fast_intervall_seconds", "fast_interval_seconds"))
    site = tmp_path / "site.toml"
    site.write_text('[checks]\nmandatory = ["run-nmae"]\n')
    project.env["GUARDED_SBATCH_SITE_CONFIG"] = str(site)
    assert "did you mean run-name?" in _error(project, "check", "train.sh")


def _check(project: Project, script: str, *args: str) -> str:
    result = project.cli_here("check", "--guard-backend", "local", *args, script)
    assert result.returncode == 3, result.stderr
    return result.stderr


def _with_config(project: Project, config: str, name: str) -> str:
    script = project.root / "train.sh"
    (project.root / name).write_text(script.read_text().replace("configs/synthetic-tanh-mlp.yaml", config))
    return name


def test_a_missing_config_and_a_folder_given_as_the_config_say_so(project: Project) -> None:
    missing = _check(project, _with_config(project, "configs/nosuch.yaml", "missing.sh"))
    assert "configs/nosuch.yaml does not exist" in missing and "all paths there" not in missing
    assert "relative paths count from the folder you submit from" in missing and str(project.root) in missing
    assert "no batch size" not in missing and "no seed" not in missing
    folder = _check(project, _with_config(project, "configs", "folder.sh"))
    assert "configs is a folder, not a config file" in folder and "does not exist" not in folder
    os.mkfifo(project.root / "configs" / "swapped.yaml")  # a co-worker's FIFO where the config was: never "ok"
    fifo = _check(project, _with_config(project, "configs/swapped.yaml", "fifo.sh"))
    assert "swapped.yaml (--config) is a FIFO, not a config file: the run cannot read it" in fifo, fifo
    assert "does not exist" not in fifo
    reference = _check(project, "train.sh", "--guard-reference", str(project.root / "configs" / "swapped.yaml"))
    assert "swapped.yaml is a FIFO, not a config file; give a config file or a run folder" in reference, reference


def test_the_run_name_rule_is_stated(project: Project) -> None:
    text = _check(project, "train.sh", "--job-name", "Coco_Baseline")
    line = next(line for line in text.splitlines() if line.startswith("[FAIL] run-name"))
    assert "lowercase ASCII" in line and "hyphens" in line and "(pattern [a-z0-9]" in line
    assert "--job-name NAME" in line and "(e.g. synthetic-regression-tanh-mlp" in line
    label = _check(project, "train.sh", "--job-name", "run-1")
    assert "session-local label" in label and "--job-name NAME" in label


def test_a_path_with_secret_in_its_name_is_shown_not_masked(project: Project) -> None:
    text = _check(project, _with_config(project, "my_secret_stuff/config.yaml", "secret.sh"))
    assert "my_secret_stuff/config.yaml does not exist" in text and "[redacted]" not in text
    leaked = project.cli_here("check", "--guard-backend", "local", "--guard-waive", "eta=token: hunter2x", "train.sh")
    assert "hunter2x" not in leaked.stderr  # a secret-shaped assignment is still masked


def test_help_of_every_command_answers(project: Project) -> None:
    for command in ("status", "stop", "monitor", "show", "check-sweep", "kill", "restart"):
        result = project.cli_here(command, "--help")
        assert result.returncode == 0 and "usage" in result.stdout.lower(), (command, result.stderr)


def test_run_says_its_own_words(project: Project) -> None:
    result = project.cli_here("run", "--guard-backend", "local", "--", "python", "train.py", "--config",
                         "configs/synthetic-tanh-mlp.yaml")
    assert result.returncode == 3, result.stderr
    assert "no run name: give --job-name NAME before the --" in result.stderr
    assert "command.sh" not in result.stderr and "To submit it, run:" not in result.stderr


def test_a_fail_line_never_says_not_checked(project: Project) -> None:
    """A misspelled key fails config-diff; the diff that has no reference yet is its own warning, not the FAIL's."""
    config = project.root / "configs" / "synthetic-tanh-mlp.yaml"
    config.write_text(config.read_text().replace("\nlr:", "\nlearning_rat:"))
    text = _check(project, "train.sh")
    fail_lines = [line for line in text.splitlines() if line.startswith("[FAIL]")]
    assert fail_lines and all("not checked" not in line for line in fail_lines), text
    assert "did you mean learning_rate?" in fail_lines[0]
    assert "also [warn]: not checked: no reference run yet" in text
