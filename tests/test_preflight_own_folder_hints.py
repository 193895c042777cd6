"""`check myproj/train.sh` from the folder above: a path the script names relative to its own folder is shown
there (submit from it, or --chdir), and a "did you mean" comes from the script's folder, never from the folder
above it (an unrelated `api_mine.py` there is never offered)."""

from __future__ import annotations

import os
from pathlib import Path

from guarded_sbatch.core.config import Config
from guarded_sbatch.launch.preflight import run_preflight
from guarded_sbatch.sbatch.argv import split_sbatch_argv
from preflight_tree import LOCAL_DISK, build_clean_tree


def _paths_from_above(tmp_path: Path, script: str = "myproj/train.sh") -> str:
    report = run_preflight(split_sbatch_argv([script]), Config(), None, cwd=tmp_path,
                           env={"PATH": os.environ.get("PATH", os.defpath)}, mounts=LOCAL_DISK)
    return next(r for r in report.results if r.name == "paths").finding


def test_a_script_submitted_from_the_folder_above_is_shown_its_own_files(tmp_path: Path) -> None:
    tree = build_clean_tree(tmp_path / "myproj")
    (tmp_path / "api_mine.py").write_text("print('an unrelated program')\n")
    (tmp_path / "train.pyc").write_text("")
    finding = _paths_from_above(tmp_path)
    assert "api_mine" not in finding and "train.pyc" not in finding
    assert f"it is in the script's folder, {tree.root / 'train.py'}" in finding
    assert f"--chdir={tree.root}" in finding


def test_a_near_name_comes_from_the_scripts_folder_only(tmp_path: Path) -> None:
    tree = build_clean_tree(tmp_path / "myproj")
    (tree.root / "train.py").rename(tree.root / "trainer.py")
    (tmp_path / "train.py.bak").write_text("")
    finding = _paths_from_above(tmp_path)
    assert f"did you mean {tree.root / 'trainer.py'}?" in finding and "train.py.bak" not in finding
