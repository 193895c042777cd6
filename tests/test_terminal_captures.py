"""What a person reads, captured from a real terminal: `check`, `status`, `show`, `--help` and the demo run in tmux
at 80×24 and 120×40 (the terminal's own width, as a user's shell gives it), and no line the program wrote is wider
than the terminal; the run's name is whole in `status` and everywhere in the demo. tmux's capture joins lines the
terminal itself wrapped (`-J`), so a line too wide for the terminal shows up as too wide, not as two."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e_helpers import Project, make_project, submitted_job_id, wait_for

SIZES = ((80, 24), (120, 40))
START, DONE = "CAPTURE-START", "CAPTURE-DONE"  # typed as printf arguments, so only the output matches


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Project, str, str]]:
    """A project with two ended local runs: one healthy, one stopped by its sidecar."""
    tmp = tmp_path_factory.mktemp("captures")
    project = make_project(tmp, fast_interval=1.0)
    project.env["GUARDED_SBATCH_BACKEND"] = "local"
    healthy = submitted_job_id(project.cli("--guard-tb", "runs/capture-healthy", "train.sh", "--steps", "120",
                                           "--logdir", "runs/capture-healthy", check=True).stdout)
    broken = submitted_job_id(project.cli("--job-name", f"{project.name}-diverging", "--guard-tb", "runs/capture-nan",
                                          "train.sh", "--steps", "3000", "--diverge-at", "40", "--logdir",
                                          "runs/capture-nan", check=True).stdout)

    def ended() -> bool:
        rows = json.loads(project.cli_here("status", "--json", check=True).stdout)["runs"]
        return all(r["state"] in ("COMPLETED", "CANCELLED", "FAILED") for r in rows if r["job_id"] in (healthy, broken))
    wait_for(ended, 180, what="both runs to end")
    yield project, healthy, broken


def capture(project: Project, command: str, width: int, height: int) -> list[str]:
    """`command` typed into a fresh tmux window of this size; the lines it printed, terminal-wrapped ones joined."""
    return capture_in(project.env, project.root, command, width, height)


def capture_in(environ: dict[str, str], folder: Path, command: str, width: int, height: int,
               timeout_s: float = 60) -> list[str]:
    socket = f"gs-capture-{uuid.uuid4().hex[:8]}"
    env = {**environ, "TERM": "xterm-256color"}
    env.pop("TMUX", None)
    tmux = ["tmux", "-L", socket, "-f", "/dev/null"]
    try:
        subprocess.run([*tmux, "new-session", "-d", "-x", str(width), "-y", str(height), "-c", str(folder),
                        "bash --norc --noprofile"], env=env, check=True, timeout=30)
        exports = " ".join(f"{k}={json.dumps(v)}" for k, v in env.items()
                           if k.startswith(("GUARDED_SBATCH_", "PATH", "PYTHON")))
        typed = f"export {exports}; clear; printf '%s-%s\\n' CAPTURE START; {command}; printf '%s-%s\\n' CAPTURE DONE"
        subprocess.run([*tmux, "send-keys", typed, "Enter"], env=env, check=True, timeout=30)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            shown = subprocess.run([*tmux, "capture-pane", "-p", "-J", "-S", "-2000"], env=env, capture_output=True,
                                   text=True, check=True, timeout=30).stdout
            lines = shown.splitlines()
            if DONE in (line.strip() for line in lines):
                first = max(i for i, line in enumerate(lines) if line.strip() == START)
                last = max(i for i, line in enumerate(lines) if line.strip() == DONE)
                return [line.rstrip() for line in lines[first + 1:last]]
            time.sleep(0.3)
        raise AssertionError(f"{command!r} did not finish in a {width}x{height} terminal")
    finally:
        subprocess.run([*tmux, "kill-server"], env=env, capture_output=True, timeout=30, check=False)


def too_wide(lines: list[str], width: int) -> list[str]:
    """Lines wider than the terminal, but for a shell command alone on its line (copied whole, never split)."""
    return [f"{len(line)}: {line}" for line in lines
            if len(line) > width and not re.fullmatch(r"\W*`[^`]+`\W*", line.strip())]


@pytest.mark.parametrize(("width", "height"), SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_check_status_show_and_help_fit_the_terminal(project: tuple[Project, str, str], width: int,
                                                    height: int) -> None:
    proj, healthy, broken = project
    commands = {
        "check": "guarded-sbatch check --guard-tb runs/capture-next train.sh --steps 50 --logdir runs/capture-next",
        "status": "guarded-sbatch status",
        "show": f"guarded-sbatch show {broken}",
        "help": "guarded-sbatch check-sweep --help",
    }
    for what, command in commands.items():
        lines = capture(proj, command, width, height)
        assert lines, f"{what} printed nothing"
        assert not too_wide(lines, width), f"{what} at {width} columns:\n" + "\n".join(too_wide(lines, width))
        if what == "status":
            tokens = {token for line in lines for token in line.split()}
            assert {proj.name, f"{proj.name}-diverging"} <= tokens, lines  # each run's name whole
        if what == "check":
            assert not any(line.strip() == "```" for line in lines)  # no Markdown fences on a terminal


REPO = Path(__file__).resolve().parents[1]
DEMO_RUNS = ("synthetic-tanh-mlp-bs64-lr5e-2-healthy", "synthetic-tanh-mlp-bs64-lr15-diverging")


@pytest.mark.waits
@pytest.mark.parametrize(("width", "height"), SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_the_demo_fits_the_terminal_with_its_run_names_whole(tmp_path: Path, width: int, height: int) -> None:
    """scripts/demo (about 40 s) as a newcomer sees it: every line within the terminal, each run's name never cut."""
    venv = Path(sys.executable).parent.parent
    env = {**os.environ, "GUARDED_SBATCH_VENV": str(venv), "GUARDED_SBATCH_DEMO_DIR": str(tmp_path / "demo"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "wrapper"), os.environ.get("PYTHONPATH")]))}
    for name in ("GUARDED_SBATCH_STATE_DIR", "GUARDED_SBATCH_USER_CONFIG", "GUARDED_SBATCH_SITE_CONFIG"):
        env.pop(name, None)
    lines = capture_in(env, REPO, "scripts/demo", width, height, timeout_s=240)
    assert any(line.startswith("FINAL_SUMMARY") for line in lines), "\n".join(lines[-40:])
    assert not too_wide(lines, width), f"the demo at {width} columns:\n" + "\n".join(too_wide(lines, width))
    tokens = {token for line in lines for token in line.split()}
    assert set(DEMO_RUNS) <= tokens, "a run's name is not whole in status"
    cut = [line for line in lines for found in re.findall(r"synthetic-tanh-mlp-bs64-lr[\w.-]*", line)
           if not any(found == name or found.startswith(name + "-") for name in DEMO_RUNS)]
    assert not cut, "a run's name cut:\n" + "\n".join(cut)
