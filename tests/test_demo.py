"""The first ten minutes: scripts/demo runs as a newcomer runs it (with the project's environment already made:
GUARDED_SBATCH_VENV), ends saying where its runs are and what to type next, and prints what the README's
transcript shows, line by line and in order (numbers, times and column padding aside)."""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import subprocess
import time
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _normal(line: str, replacements: dict[str, str]) -> str:
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


def _demo_env(tmp_path: Path) -> dict[str, str]:
    venv = Path(sys.executable).parent.parent
    env = {**os.environ, "GUARDED_SBATCH_VENV": str(venv), "GUARDED_SBATCH_DEMO_DIR": str(tmp_path / "demo-out"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "wrapper"), os.environ.get("PYTHONPATH")]))}
    for name in ("GUARDED_SBATCH_STATE_DIR", "GUARDED_SBATCH_USER_CONFIG", "GUARDED_SBATCH_SITE_CONFIG", "NO_COLOR"):
        env.pop(name, None)
    return env


def test_the_demo_prints_what_the_readme_shows(tmp_path: Path) -> None:
    venv = Path(sys.executable).parent.parent
    env = _demo_env(tmp_path)
    env.pop("GUARDED_SBATCH_DEMO_DIR")  # its own folder, as the README shows it
    done = subprocess.run([str(REPO / "scripts" / "demo")], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=240, stdin=subprocess.DEVNULL)
    output = done.stdout
    assert done.returncode == 0, output[-4000:]
    assert "\x1b[" not in output, "escape codes in the demo's output to a pipe"
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


def _first_header_on_a_terminal(env: dict[str, str]) -> str:
    """The demo's output on a terminal (a pty) up to its first header; the demo is then ended (nothing is submitted
    before that header)."""
    main, child = pty.openpty()
    demo = subprocess.Popen([str(REPO / "scripts" / "demo")], env=env, stdin=subprocess.DEVNULL, stdout=child,
                            stderr=child, start_new_session=True)
    os.close(child)
    seen = b""
    deadline = time.monotonic() + 60
    try:
        while b"1/4" not in seen and time.monotonic() < deadline:
            ready, _, _ = select.select([main], [], [], 1.0)
            if ready:
                try:
                    seen += os.read(main, 4096)
                except OSError:  # the terminal closed: the demo ended
                    break
    finally:
        os.killpg(demo.pid, signal.SIGTERM)
        demo.wait(timeout=30)
        os.close(main)
    text = seen.decode(errors="replace")
    assert "1/4" in text, text
    return text


def test_the_demo_is_bold_on_a_terminal_unless_no_color(tmp_path: Path) -> None:
    env = _demo_env(tmp_path)
    assert "\x1b[1m== 1/4" in _first_header_on_a_terminal(env)
    assert "\x1b[" not in _first_header_on_a_terminal({**env, "NO_COLOR": "1"})
