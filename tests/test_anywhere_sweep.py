"""`guarded-sbatch check-sweep` and the `wandb sweep` shim: every combination of a W&B sweep through the
launch pre-flight, blocked unless waived exactly like a launch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from e2e_helpers import make_project
from guarded_sbatch.core.errors import UsageError
from guarded_sbatch.launch.sweep import Sweep, combinations, command_words, load_sweep, render_run_name

REPO = Path(__file__).resolve().parents[1]
NAME = "synthetic-regression-tanh-mlp-bs{batch_size}-lr{lr}"
SWEEP = """\
program: train.py
method: random
project: tiny-mlp
entity: lab
command: ["${env}", "${interpreter}", "${program}", "--config", "configs/synthetic-tanh-mlp.yaml", "${args}"]
parameters:
  batch_size: {value: 256}
  lr: {min: 0.01, max: 0.1, distribution: log_uniform_values}
"""

# 4x the reference's batch with an lr range below both rescaled values (linear 0.2, square-root 0.1)
MISSING_LR = SWEEP.replace("min: 0.01, max: 0.1", "min: 0.005, max: 0.05")


def _sweep(project, text: str = SWEEP) -> Path:  # type: ignore[no-untyped-def]
    path = project.root / "sweep.yaml"
    path.write_text(text)
    return path


def test_combinations_and_command_lines(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("program: t.py\nmethod: grid\nparameters:\n  opt:\n    parameters:\n      lr: {values: [0.1, 0.2]}\n"
                    "  bs: {values: [8, 16]}\n  amp: {value: true}\n")
    sweep = load_sweep(path, env={})
    combos, total = combinations(sweep)
    assert total == 4 and combos[0] == {"opt.lr": 0.1, "bs": 8, "amp": True}
    assert command_words(sweep, combos[0]) == ["python", "t.py", "--opt.lr=0.1", "--bs=8", "--amp=true"]
    assert render_run_name("m-bs{bs}-lr{lr}", combos[3]) == "m-bs16-lr0.2"
    with pytest.raises(UsageError):
        render_run_name("m-{nope}", combos[0])
    path.write_text("program: t.py\nmethod: grid\nparameters:\n  lr: {min: 0.1, max: 1}\n")
    with pytest.raises(UsageError, match="grid search needs `values`"):
        load_sweep(path, env={})
    assert isinstance(sweep, Sweep)


def test_check_sweep_blocks_an_lr_range_that_ignores_the_batch_change_and_names_the_combination(tmp_path: Path) -> None:
    project = make_project(tmp_path, history=True)  # its baseline is the reference
    _sweep(project, MISSING_LR)
    result = project.cli_here("check-sweep", "--guard-run-name", NAME, "sweep.yaml", "--json")
    assert result.returncode == 3, result.stderr
    assert "combination 1/2 (batch_size=256, lr=0.005): BLOCKED" in result.stderr
    assert ("global batch 64 -> 256 (×4) but the sweep's learning rates (0.005 .. 0.05) miss the reference's 0.05 "
            "rescaled for it (linear rule 0.2, square-root rule 0.1)") in result.stderr
    assert "BLOCKED by: config-diff in combination 1 (batch_size=256, lr=0.005)" in result.stderr
    report = json.loads(result.stdout)
    assert report["blocked"] and [c["blocked"] for c in report["combinations"]] == [True, True]
    assert report["combinations"][1]["run_name"] == "synthetic-regression-tanh-mlp-bs256-lr0.05"
    waived = project.cli_here("check-sweep", "--guard-run-name", NAME, "--guard-waive",
                              "config-diff=LR range explored on purpose", "sweep.yaml")
    assert waived.returncode == 0, waived.stderr
    assert "Clear to start the sweep." in waived.stderr and "(waived)" in waived.stderr


GRID = """\
program: train.py
method: grid
project: tiny-mlp
command: ["${env}", "${interpreter}", "${program}", "--config", "configs/synthetic-tanh-mlp.yaml", "${args}"]
parameters:
  batch_size: {values: [64, 128, 256]}
  lr: LR
"""


def test_an_ordinary_lr_by_batch_size_grid_passes_and_a_fixed_lr_over_batch_sizes_does_not(tmp_path: Path) -> None:
    project = make_project(tmp_path, history=True)  # its baseline is the reference
    _sweep(project, GRID.replace("LR", "{values: [0.025, 0.05, 0.1, 0.2]}"))
    grid = project.cli_here("check-sweep", "--guard-run-name", NAME, "sweep.yaml", "--json")
    assert grid.returncode == 0, grid.stderr  # 12 combinations, each batch size's rescaled lr within the grid
    report = json.loads(grid.stdout)
    assert len(report["combinations"]) == 12 and not report["blocked"]
    assert "the sweep's learning rates (0.025 .. 0.2) reach the rescaled value" in grid.stderr
    _sweep(project, GRID.replace("LR", "{value: 0.05}"))  # batch swept, lr left where the reference had it
    fixed = project.cli_here("check-sweep", "--guard-run-name", NAME, "sweep.yaml", "--json")
    assert fixed.returncode == 3, fixed.stderr
    blocked = [c["blocked"] for c in json.loads(fixed.stdout)["combinations"]]
    assert blocked == [False, True, True]  # bs 64 is the reference's own; 128 and 256 keep its lr: real regressors
    assert "but the learning rate was not rescaled (0.05 -> 0.05" in fixed.stderr


def test_check_sweep_needs_a_project_and_a_run_name_pattern(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    project.env.pop("WANDB_PROJECT", None)
    _sweep(project, SWEEP.replace("project: tiny-mlp\n", "").replace("value: 256", "value: 64"))
    result = project.cli_here("check-sweep", "sweep.yaml")
    assert result.returncode == 3
    assert "[FAIL] monitoring: the sweep names no W&B project" in result.stderr
    assert "[FAIL] run-name" in result.stderr  # no pattern: the agent's runs would get no meaningful name


def test_wandb_shim_preflights_wandb_sweep_and_passes_everything_else(tmp_path: Path) -> None:
    project = make_project(tmp_path, history=True)  # its baseline is the reference
    _sweep(project, MISSING_LR)
    calls = tmp_path / "calls.txt"
    fake = tmp_path / "real-wandb"
    fake.write_text(f"#!/bin/bash\necho \"$*\" >> {calls}\n")
    fake.chmod(0o755)
    env = {**project.env, "GUARDED_SBATCH_REAL_WANDB": str(fake), "GUARDED_SBATCH_PYTHON": sys.executable}
    env.pop("WANDB_PROJECT", None)

    def shim(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(REPO / "shims" / "wandb"), *args], cwd=project.root, env=env,
                              capture_output=True, text=True, timeout=120, check=False)

    blocked = shim("sweep", "--guard-run-name", NAME, "sweep.yaml")
    assert blocked.returncode == 3 and "BLOCKED by: config-diff" in blocked.stderr
    assert not calls.exists()  # no sweep was created
    clear = shim("sweep", f"--guard-run-name={NAME}", "--guard-waive", "config-diff=on purpose", "sweep.yaml")
    assert clear.returncode == 0, clear.stderr
    (project.root / "noproject.yaml").write_text(SWEEP.replace("project: tiny-mlp\n", ""))
    waive = ("--guard-waive", "config-diff=on purpose", f"--guard-run-name={NAME}")
    assert shim("sweep", *waive, "noproject.yaml").returncode == 3  # runs would land in the default project
    named = shim("sweep", *waive, "--project", "tiny-mlp", "noproject.yaml")
    assert named.returncode == 0 and "W&B lab/tiny-mlp" in named.stderr, named.stderr
    assert shim("sweep", "--stop", "lab/tiny-mlp/abc123").returncode == 0
    assert shim("login", "--relogin").returncode == 0
    assert calls.read_text().splitlines() == ["sweep sweep.yaml", "sweep --project tiny-mlp noproject.yaml",
                                              "sweep --stop lab/tiny-mlp/abc123", "login --relogin"]
    assert os.access(REPO / "shims" / "wandb", os.X_OK)


def test_a_points_output_folder_made_empty_beforehand_is_no_taken_name(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    _sweep(project, GRID.replace("{values: [64, 128, 256]}", "{value: 64}").replace("LR", "{value: 0.05}"))
    name = "synthetic-regression-tanh-mlp-bs64-lr0.05"
    user_config = Path(project.env["GUARDED_SBATCH_USER_CONFIG"])  # each run's outputs under outputs/<name>
    user_config.write_text(f'run_roots = ["{project.root / "outputs"}"]\n' + user_config.read_text())
    free = project.cli_here("check-sweep", "--guard-run-name", NAME, "sweep.yaml", "--json")
    (point,) = json.loads(free.stdout)["combinations"]
    run_name = next(c for c in point["checks"] if c["name"] == "run-name")
    checked = [line.removeprefix("checked ") for line in run_name["evidence"] if line.startswith("checked ")]
    assert point["run_name"] == name and checked, run_name  # the point's output folder(s) the check looks at
    for folder in checked:
        Path(folder).mkdir(parents=True, exist_ok=True)  # `mkdir -p runs/NAME`, as a user does before a sweep
    made = project.cli_here("check-sweep", "--guard-run-name", NAME, "sweep.yaml", "--json")
    assert made.returncode == free.returncode == 0, made.stderr
    assert "taken" not in made.stderr and not json.loads(made.stdout)["blocked"]
    (Path(checked[0]) / "events.out.tfevents.1.host").write_bytes(b"")  # a run has written it: the name is taken
    taken = project.cli_here("check-sweep", "--guard-run-name", NAME, "sweep.yaml", "--json")
    assert taken.returncode == 3 and f"run name {name!r} is taken" in taken.stderr
