"""The package's complexity limit is 12 and nothing in it is excused: no `noqa: C901`, no per-file ignore."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 12


def test_the_limit_is_12_and_no_package_file_is_exempt() -> None:
    lint = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["lint"]
    assert lint["mccabe"]["max-complexity"] == LIMIT
    assert "C90" in lint["select"]
    exempt = {pattern: codes for pattern, codes in lint.get("per-file-ignores", {}).items()
              if any(code.startswith("C9") for code in codes)}
    assert not any(pattern.startswith(("wrapper", "tests")) for pattern in exempt), exempt


def test_every_function_of_the_package_and_the_tests_is_within_the_limit_even_ignoring_noqa() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--select", "C901", "--ignore-noqa", "--no-cache",
         "--output-format", "concise", "wrapper", "tests"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
