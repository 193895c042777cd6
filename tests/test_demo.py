"""The first ten minutes: scripts/demo runs as a newcomer runs it (with the project's environment already made:
GUARDED_SBATCH_VENV), ends saying where its runs are and what to type next, and prints what the README's
transcript shows, line by line and in order (numbers, times and column padding aside)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _normal(line: str, replacements: dict[str, str]) -> str:
    line = re.sub(r"\x1b\[[0-9;]*m", "", line)
    # the diverging run's loss reaches inf ten steps after it explodes: which of the two true reasons the sidecar
    # names depends on how many inf steps its first read holds
    line = line.replace("STOP (non_finite_loss)", "STOP (divergence)")
    for old, new in replacements.items():
        line = line.replace(old, new)
    return " ".join(re.sub(r"\d+", "0", line).split())


def _transcript() -> list[str]:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    block = readme.split("<!-- demo-transcript -->", 1)[1].split("```", 2)[1]
    return [line for line in block.splitlines() if line.strip()]


def test_the_demo_prints_what_the_readme_shows(tmp_path: Path) -> None:
    venv = Path(sys.executable).parent.parent
    env = {**os.environ, "GUARDED_SBATCH_VENV": str(venv),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "wrapper"), os.environ.get("PYTHONPATH")]))}
    for name in ("GUARDED_SBATCH_STATE_DIR", "GUARDED_SBATCH_USER_CONFIG", "GUARDED_SBATCH_SITE_CONFIG"):
        env.pop(name, None)
    done = subprocess.run([str(REPO / "scripts" / "demo")], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=240, stdin=subprocess.DEVNULL)
    output = done.stdout
    assert done.returncode == 0, output[-4000:]
    replacements = {str(venv / "bin"): "<repo>/.venv/bin", str(REPO): "<repo>"}
    printed = [_normal(line, replacements) for line in output.splitlines()]
    position = 0
    for wanted in _transcript():
        expected = _normal(wanted, {})
        while position < len(printed) and printed[position] != expected:
            position += 1
        assert position < len(printed), f"the README's line is not printed (in this order): {wanted!r}\n{output[-3000:]}"
        position += 1
    tail = output.rstrip().splitlines()[-6:]
    assert any("guarded-sbatch status" in line for line in tail) and any("GUARDED_SBATCH_STATE_DIR=" in line for line in tail)
