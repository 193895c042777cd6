"""The pre-flight names the interpreter the job will run and blocks when it cannot import what the training script
imports — the user's own environment first on PATH, one lacking torch, guarded-sbatch's own environment put first by
mistake, an environment the script activates itself, and a `module load` only a running shell can follow."""

from __future__ import annotations

import json
import os
import sys
import sysconfig
import venv
from pathlib import Path

from cli_runner import run_cli

TOOL_SITE = sysconfig.get_paths()["purelib"]  # the suite's environment: torch is installed there


def user_env(path: Path, *, with_torch: bool) -> Path:
    """A user's own virtual environment; with torch, its site-packages reaches the suite's (a `.pth` line)."""
    venv.EnvBuilder(with_pip=False, symlinks=True).create(path)
    site = next((path / "lib").glob("python3*/site-packages"))
    if with_torch:
        (site / "users-torch.pth").write_text(TOOL_SITE + "\n", encoding="utf-8")
    return path


def project(tmp_path: Path, script_lines: str = "", body: str = "import torch\n") -> Path:
    root = tmp_path / "proj"
    root.mkdir()
    (root / "train.py").write_text(body + "print('trained', __import__('sys').prefix)\n", encoding="utf-8")
    (root / "train.sh").write_text(
        "#!/bin/bash\n#SBATCH --job-name=synthetic-tanh-mlp-bs64-lr5e-2-interp\n#SBATCH --time=00:05:00\n"
        f"{script_lines}python train.py --steps 10\n", encoding="utf-8")
    return root


def check(root: Path, path_first: Path | None, tmp_path: Path) -> tuple[int, dict, str]:
    env = {**os.environ, "GUARDED_SBATCH_STATE_DIR": str(tmp_path / "state"), "GUARDED_SBATCH_BACKEND": "local",
           "PATH": f"{path_first}:/usr/bin:/bin" if path_first else "/usr/bin:/bin"}
    env.pop("VIRTUAL_ENV", None)
    done = run_cli(["check", "--json", "train.sh"], env=env, cwd=root)
    report = json.loads(done.stdout)
    found = next(c for c in report["checks"] if c["name"] == "interpreter")
    return done.returncode, found, done.stderr


def test_the_users_environment_with_torch_passes_and_is_named(tmp_path: Path) -> None:
    mine = user_env(tmp_path / "myenv", with_torch=True)
    code, found, _ = check(project(tmp_path), mine / "bin", tmp_path)
    assert found["status"] == "passed", found
    assert str(mine / "bin" / "python") in found["finding"] and "torch" in found["finding"]
    assert any("the job runs" in line and str(mine) in line for line in found["evidence"]), found


def test_an_environment_without_torch_blocks_naming_the_interpreter_and_the_module(tmp_path: Path) -> None:
    bare = user_env(tmp_path / "bare", with_torch=False)
    code, found, _ = check(project(tmp_path), bare / "bin", tmp_path)
    assert code == 3 and found["status"] == "failed", found
    assert str(bare / "bin" / "python") in found["finding"]
    assert "cannot import torch (train.py line 1)" in found["finding"]
    assert "source ENV/bin/activate" in found["finding"]  # the fix that applies


def test_guarded_sbatchs_own_environment_first_on_path_is_said_to_be_the_cause(tmp_path: Path) -> None:
    root = project(tmp_path, body="import torch\nimport surely_not_a_module_anyone_installed\n")
    code, found, _ = check(root, Path(sys.executable).parent, tmp_path)
    assert code == 3 and "surely_not_a_module_anyone_installed (train.py line 2)" in found["finding"], found
    assert "guarded-sbatch's own environment" in found["finding"]


def test_an_environment_the_script_activates_is_the_one_asked(tmp_path: Path) -> None:
    mine = user_env(tmp_path / "myenv", with_torch=True)
    bare = user_env(tmp_path / "bare", with_torch=False)
    root = project(tmp_path, script_lines=f"source {mine}/bin/activate\n")
    code, found, _ = check(root, bare / "bin", tmp_path)  # the submitting shell has the bare one first
    assert found["status"] == "passed", found
    assert any(f"source {mine}/bin/activate" in line for line in found["evidence"])


def test_a_module_load_the_check_cannot_follow_warns_instead_of_blocking(tmp_path: Path) -> None:
    bare = user_env(tmp_path / "bare", with_torch=False)
    root = project(tmp_path, script_lines="module load pytorch/2.3\n")
    code, found, _ = check(root, bare / "bin", tmp_path)
    assert found["status"] == "warned", found
    assert any("module load pytorch/2.3" in line for line in found["evidence"])


def test_imports_in_helpers_or_try_blocks_are_optional(tmp_path: Path) -> None:
    bare = user_env(tmp_path / "bare", with_torch=False)
    body = ("try:\n    import wandb\nexcept ImportError:\n    wandb = None\n\n"
            "def plot():\n    import matplotlib\n\n"
            "def main():\n    import yaml_is_not_here_either\n")
    code, found, _ = check(project(tmp_path, body=body), bare / "bin", tmp_path)
    assert found["status"] == "failed" and "yaml_is_not_here_either" in found["finding"], found
    assert "wandb" not in found["finding"] and "matplotlib" not in found["finding"]


def test_an_integration_the_config_reports_to_must_be_importable_too(tmp_path: Path) -> None:
    mine = user_env(tmp_path / "myenv", with_torch=True)
    (mine / "lib").joinpath(next(p.name for p in (mine / "lib").iterdir()), "site-packages", "wandb.py").write_text(
        "raise ImportError('a stand-in that must never be imported: find_spec only looks')\n", encoding="utf-8")
    root = project(tmp_path, body="import torch\n")
    (root / "train.sh").write_text((root / "train.sh").read_text().replace("--steps 10", "--config c.yaml"))
    (root / "c.yaml").write_text("report_to: [tensorboard, wandb, comet_ml]\nlr: 0.1\n", encoding="utf-8")
    code, found, _ = check(root, mine / "bin", tmp_path)
    assert code == 3 and found["status"] == "failed", found
    assert found["finding"].split(" cannot import ")[1].startswith("comet_ml (the config's report_to)"), found


def test_a_package_a_helper_imports_that_the_job_lacks_is_a_warning_naming_the_function(tmp_path: Path) -> None:
    """The example trainer imports tensorboard inside make_writer(): a job whose environment lacks it passed the
    pre-flight and died at its first step. Whether that code runs cannot be known: a warning, not a block."""
    mine = user_env(tmp_path / "myenv", with_torch=True)
    body = ("import torch\n\ndef make_writer():\n    import surely_not_a_module_anyone_installed\n\n"
            "def maybe():\n    if False:\n        import another_module_nobody_has\n")
    code, found, _ = check(project(tmp_path, body=body), mine / "bin", tmp_path)
    assert code == 0 and found["status"] == "warned", found
    assert "surely_not_a_module_anyone_installed in make_writer() (line 4)" in found["finding"], found
    assert "another_module_nobody_has" not in found["finding"]  # a conditional import stays optional


def test_an_answer_that_finds_everything_is_remembered_until_a_package_folder_changes(tmp_path: Path) -> None:
    """A loop of launches asks the job's Python once; removing what it found (here: the `.pth` line that reached torch,
    a change to its site-packages folder) makes the next launch ask again, and block."""
    mine = user_env(tmp_path / "myenv", with_torch=True)
    root = project(tmp_path)
    remembered = tmp_path / "state" / "remembered" / "interpreter-imports.json"
    assert check(root, mine / "bin", tmp_path)[1]["status"] == "passed"
    first = json.loads(remembered.read_text())
    assert len(first) == 1 and next(iter(first.values()))["answer"]["missing"] == []
    assert check(root, mine / "bin", tmp_path)[1]["status"] == "passed"
    assert json.loads(remembered.read_text()) == first  # answered from memory: not asked, not written again
    next((mine / "lib").glob("python3*/site-packages/users-torch.pth")).unlink()
    code, found, _ = check(root, mine / "bin", tmp_path)
    assert code == 3 and "cannot import torch (train.py line 1)" in found["finding"], found
