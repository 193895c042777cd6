"""A copy of guarded_sbatch with one piece added the documented way — a module and its line in a table — for the tests
that show a piece is added so (tests/test_source_registry.py, test_run_id_kind.py, test_judge_check_added.py). The
tree is shared, so the real package is left alone; every process of such a test runs from the copy (PYTHONPATH), and
the test checks that nothing else of the copy differs."""

from __future__ import annotations

import difflib
import filecmp
import shutil
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "wrapper" / "guarded_sbatch"


def package_copy(root: Path, module: str, text: str, table: str, edits: list[tuple[str, str]]) -> Path:
    """`root` holding a copy of the package with `text` written as `module` (a path below the package) and, in the
    module `table`, each (anchor, replacement) made (each anchor found exactly once). Returns `root`."""
    copy = root / "guarded_sbatch"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / module).write_text(text)
    changed = (copy / table).read_text()
    for anchor, replacement in edits:
        assert changed.count(anchor) == 1, anchor
        changed = changed.replace(anchor, replacement)
    (copy / table).write_text(changed)
    return root


def differences(left: Path, right: Path, prefix: str = "") -> tuple[list[str], list[str]]:
    """Files only in `right`, and files that differ, between two trees (relative paths); none only in `left`."""
    compared = filecmp.dircmp(left, right, ignore=["__pycache__"])
    assert compared.left_only == [], compared.left_only
    added, changed = [prefix + n for n in compared.right_only], [prefix + n for n in compared.diff_files]
    for name in compared.common_dirs:
        more_added, more_changed = differences(left / name, right / name, f"{prefix}{name}/")
        added, changed = added + more_added, changed + more_changed
    return added, changed


def changed_lines(module: str, copy_root: Path) -> list[str]:
    """The lines of `module` the copy adds ("+...") or removes ("-...") against the real package."""
    real = (PACKAGE / module).read_text().splitlines(True)
    copied = (copy_root / "guarded_sbatch" / module).read_text().splitlines(True)
    return [line for line in difflib.unified_diff(real, copied, n=0)
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]
