"""The README followed as a new user follows it (issue 36): a fresh clone of the committed tree, the set-up commands
and the install line read from the README's own text (so a changed README changes what runs), then the user's own
tiny PyTorch project from a shell where their venv is activated: `guarded-sbatch train.sh` runs the job with their
python and torch, on the local backend and on the dev Slurm; from a venv without torch the same launch is blocked
by the pre-flight naming the interpreter and `torch`.

What tests/test_install_tool.py and tests/test_preflight_interpreter.py already cover (the link alone in BIN, the
interpreter check's cases, in this checkout) is not repeated; this follows the README's steps from a clone."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sysconfig
import uuid
import venv
from pathlib import Path

import pytest

from e2e_helpers import wait_for
from test_preflight_interpreter import user_env

pytestmark = pytest.mark.waits
REPO = Path(__file__).resolve().parents[1]
SUITE_SITE = sysconfig.get_paths()["purelib"]  # the suite's environment: the dependencies the set-up installs


def section(readme: str, heading: str) -> str:
    """The README's text under the `## heading…` line, up to the next `## `."""
    found = re.search(rf"^## {re.escape(heading)}.*?$(.*?)(?=^## )", readme, re.S | re.M)
    assert found, f"the README has no section '## {heading}'"
    return found.group(1)


def code_lines(text: str) -> list[str]:
    """The commands of the section's code blocks, comments dropped."""
    blocks = re.findall(r"```[a-z]*\n(.*?)```", text, re.S)
    return [shlex.join(shlex.split(line, comments=True)) for block in blocks for line in block.splitlines()
            if shlex.split(line, comments=True)]


def fresh_shell(home: Path, *path_first: Path) -> dict[str, str]:
    """A new terminal of a new user: no environment of the suite's active, their own HOME."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GUARDED_SBATCH_", "VIRTUAL_ENV", "PYTHON", "XDG_", "CONDA"))}
    outside_venvs = [p for p in os.environ["PATH"].split(":") if p and not (Path(p).parent / "pyvenv.cfg").exists()]
    env.update(HOME=str(home), PATH=":".join([*map(str, path_first), *outside_venvs]))
    return env


def sh(command: str, cwd: Path, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, check=False)


def premade_venv(clone: Path) -> None:
    """What the set-up commands' first run installs, `.venv` with the project and its dependencies, made here without
    downloading them: a venv whose site-packages reaches the suite's (torch, tensorboard ...), the clone's own code
    first on its path, and ensure_venv's stamps (nothing to install). Its `guarded-sbatch` command is not made here:
    ensure_venv writes it (the package declares no console script), as on a real first run."""
    env_dir = clone / ".venv"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(env_dir)
    site = next((env_dir / "lib").glob("python3*/site-packages"))
    # a path line, then the suite's site-packages as a site dir (its .pth lines read: the clone's code stays first)
    (site / "guarded_sbatch_clone.pth").write_text(
        f"{clone / 'wrapper'}\nimport site; site.addsitedir({SUITE_SITE!r})\n", encoding="utf-8")
    for extra in ("main", "examples", "test,torch,frameworks"):
        (env_dir / f".installed-{extra}").touch()


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh clone of the committed tree (what a new user gets), its `.venv` pre-made (premade_venv)."""
    target = tmp_path_factory.mktemp("fresh") / "guarded-sbatch"
    done = subprocess.run(["git", "clone", "-q", str(REPO), str(target)], capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    premade_venv(target)
    return target


@pytest.fixture(scope="module")
def installed(clone: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The README's install line run as written, in a shell whose PATH lacks ~/.local/bin: it links the command
    there and says how to put that folder on PATH. Returns the new user's HOME."""
    home = tmp_path_factory.mktemp("home")
    readme = (clone / "README.md").read_text(encoding="utf-8")
    [install_line] = code_lines(section(readme, "Install it as a tool"))
    done = sh(install_line, clone, fresh_shell(home))
    assert done.returncode == 0, done.stderr
    bin_dir = home / ".local" / "bin"
    assert f'export PATH="{bin_dir}:$PATH"' in done.stderr, done.stderr  # the hint the user follows next
    assert os.readlink(bin_dir / "guarded-sbatch") == str(clone / ".venv" / "bin" / "guarded-sbatch")
    return home


def test_the_set_up_commands_of_a_fresh_clone_run(clone: Path, tmp_path: Path) -> None:
    readme = (clone / "README.md").read_text(encoding="utf-8")
    demo, test = code_lines(section(readme, "Set-up on a fresh machine"))
    env = fresh_shell(tmp_path / "home")
    done = sh(demo, clone, env, timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    summary = done.stdout.partition("FINAL_SUMMARY")[2]  # its lines in order are test_demo.py's to check
    assert "- Decision: STOP" in summary and "cancelled" in summary, done.stdout[-3000:]
    assert any("guarded-sbatch status" in line for line in done.stderr.rstrip().splitlines()[-6:])  # what to type next
    # The test command runs the whole suite, this test among it: here only that it is wired, step by step: its script
    # is sound bash, its first step (the system tools) has nothing left to do, and the pytest it ends with collects
    # every test of the clone with the clone's environment (a test importing something not committed fails here).
    words = shlex.split(test)
    assert os.access(clone / words[0], os.X_OK) and sh(f"bash -n {words[0]}", clone, env).returncode == 0
    first = sh("source scripts/lib/venv.sh && ensure_test_tools", clone, env)
    assert first.returncode == 0 and not first.stderr, first.stderr
    collected = subprocess.run([str(clone / ".venv" / "bin" / "python"), "-m", "pytest", "--collect-only", "-q",
                                "-p", "no:cacheprovider"], cwd=clone, env={**env, "PATH": f"{clone}/.venv/bin:{env['PATH']}"},
                               capture_output=True, text=True, timeout=180, check=False)
    errors = collected.stdout[collected.stdout.find("= ERRORS ="):][:3000] + collected.stderr[-2000:]
    assert collected.returncode == 0, f"a fresh clone's tests do not collect:\n{errors}"
    count = re.search(r"^(\d+) tests collected", collected.stdout, re.M)
    assert count and int(count.group(1)) > 1000 and "tests/test_demo.py::" in collected.stdout, collected.stdout[-500:]
    assert str(clone / "wrapper") in subprocess.run(  # the clone's code, not this checkout's
        [str(clone / ".venv" / "bin" / "python"), "-c", "import guarded_sbatch; print(guarded_sbatch.__file__)"],
        capture_output=True, text=True, timeout=60, check=True).stdout


def users_project(tmp_path: Path) -> Path:
    """The new user's own tiny PyTorch project: train.py imports torch and says which python and torch it ran."""
    root = tmp_path / "my-project"
    root.mkdir(parents=True)
    (root / "train.py").write_text(
        "import sys\n\nimport torch\n\n"
        "print('python', sys.executable)\nprint('torch', torch.__file__)\n"
        "print('loss', float(torch.nn.functional.mse_loss(torch.ones(4), torch.zeros(4))))\n", encoding="utf-8")
    (root / "train.sh").write_text(
        "#!/bin/bash\n"
        f"#SBATCH --job-name=synthetic-ones-mse-torch-check-{uuid.uuid4().hex[:6]}\n"
        "#SBATCH --time=00:05:00\n#SBATCH --mem=400M\npython train.py\n", encoding="utf-8")
    return root


def launch_line(clone: Path) -> str:
    """The README's launch of one's own script (its five-minute section)."""
    text = section((clone / "README.md").read_text(encoding="utf-8"), "Your own script in five minutes")
    assert "`guarded-sbatch train.sh`" in text
    return "guarded-sbatch train.sh"


def activated(env_dir: Path, command: str) -> str:
    return f"source {shlex.quote(str(env_dir / 'bin' / 'activate'))} && {command}"


@pytest.mark.slurm
def test_the_users_job_runs_with_their_own_torch_locally_and_on_slurm(
        clone: Path, installed: Path, slurm_cluster: None, tmp_path: Path) -> None:
    mine = user_env(tmp_path / "myenv", with_torch=True)
    env = fresh_shell(installed, installed / ".local" / "bin")
    jobs = {}
    for backend, options in (("local", "--guard-backend local "), ("slurm", "")):  # Slurm: the default with sbatch
        root = users_project(tmp_path / backend)
        command = launch_line(clone).replace("guarded-sbatch ", f"guarded-sbatch {options}", 1)
        done = sh(activated(mine, command), root, env)
        assert done.returncode == 0, done.stderr
        assert f"the job runs {mine / 'bin' / 'python'}" in done.stderr, done.stderr
        jobs[backend] = (root, done.stdout.split()[-1])
    for backend, (root, job_id) in jobs.items():
        out = root / f"slurm-{job_id}.out"
        wait_for(lambda: out.exists() and "loss" in out.read_text(), 120, 0.5, f"the {backend} job's output")
        lines = dict(line.split(" ", 1) for line in out.read_text().splitlines() if " " in line)
        assert lines["python"] == str(mine / "bin" / "python"), out.read_text()  # their venv's python
        assert Path(lines["torch"]).is_relative_to(SUITE_SITE), out.read_text()  # the torch their venv reaches
        status = wait_for(lambda: _ended(sh(activated(mine, "guarded-sbatch status --json"), root, env), installed,
                                         job_id), 90, 1, f"the {backend} job and its sidecar to end")
        assert status["state"] == "COMPLETED" and status["backend"] == backend, status


def _ended(done: subprocess.CompletedProcess[str], home: Path, job_id: str) -> dict | None:
    """The job's status row once it has completed and its sidecar has said its last words."""
    rows = [r for r in json.loads(done.stdout)["runs"] if r["job_id"] == job_id] if done.returncode == 0 else []
    if not rows or rows[0]["state"] != "COMPLETED":
        return None
    runs = home / ".local" / "state" / "guarded-sbatch" / "runs" / rows[0]["run_id"]
    said = "".join(p.read_text(errors="replace") for p in runs.glob("sidecar-*.out"))
    return rows[0] if "sidecar done" in said else None


@pytest.mark.slurm
def test_a_venv_without_torch_is_blocked_naming_the_interpreter_and_torch(
        clone: Path, installed: Path, slurm_cluster: None, tmp_path: Path) -> None:
    bare = user_env(tmp_path / "bare", with_torch=False)
    root = users_project(tmp_path)
    done = sh(activated(bare, launch_line(clone)), root, fresh_shell(installed, installed / ".local" / "bin"))
    assert done.returncode == 3, done.stderr
    assert f"{bare / 'bin' / 'python'} cannot import torch (train.py line 3)" in done.stderr, done.stderr
    assert "BLOCKED by: interpreter" in done.stderr and not done.stdout.strip()  # nothing submitted
