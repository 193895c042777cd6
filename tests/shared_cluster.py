"""Two real Unix users sharing a project folder, made by the test set-up (we run as root): a victim and a
co-worker in one group, a group-writable setgid project folder, private homes. Commands run as either user
through setpriv with that user's groups; everything is removed afterwards."""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import require

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int
    home: Path


@dataclass(frozen=True)
class SharedCluster:
    base: Path  # everything of this set-up lives here (0755, root's)
    group: str
    gid: int
    project: Path  # group-writable, setgid: the shared project folder
    victim: User
    coworker: User
    python: Path  # an interpreter both users can run, with the project's packages (see _shared_python)

    def env(self, user: User, **extra: str) -> dict[str, str]:
        """A login-like environment for `user`: the project's venv and this worktree's code first."""
        env = {
            "HOME": str(user.home), "USER": user.name, "LOGNAME": user.name, "LANG": "C.UTF-8",
            "PATH": f"{self.python.parent}:/usr/local/bin:/usr/bin:/bin",
            "PYTHONPATH": str(REPO / "wrapper"), "PYTHON": str(self.python), "GUARDED_SBATCH_PYTHON": str(self.python),
            "LD_LIBRARY_PATH": str(self.python.parents[2] / "python" / "lib"), "TZ": "UTC",
        }
        env.update(extra)
        return env

    def run(self, user: User, argv: list[str], *, cwd: Path | None = None, env: Mapping[str, str] | None = None,
            timeout: float = 120, umask: str = "002", input_text: str | None = None) -> subprocess.CompletedProcess[str]:
        """argv as `user` (its uid, primary group and supplementary groups), with the given umask."""
        wrapped = ["setpriv", f"--reuid={user.uid}", f"--regid={user.gid}", "--init-groups", "--",
                   "sh", "-c", f'umask {umask} && exec "$@"', "sh", *argv]
        return subprocess.run(wrapped, cwd=cwd or self.project, env=dict(env) if env is not None else self.env(user),
                              capture_output=True, text=True, timeout=timeout, input=input_text,
                              stdin=None if input_text is not None else subprocess.DEVNULL)

    def copy_project(self, source: Path, name: str) -> Path:
        """A copy of `source` in the shared project folder, as the victim's group-shared work: owned by the victim,
        the project group's, group-writable, every folder setgid."""
        target = self.project / name
        shutil.copytree(source, target, ignore=shutil.ignore_patterns("events.out.tfevents.*", "__pycache__"))
        for path in [target, *target.rglob("*")]:
            os.chown(path, self.victim.uid, self.gid, follow_symlinks=False)
            if not path.is_symlink():
                path.chmod(path.stat().st_mode | 0o020 | (0o2000 if path.is_dir() else 0))
        return target

    def fast_sidecar(self, user: User, *, evidence_plot: bool = False) -> None:
        """The user's own config with short sidecar intervals (tests poll; real runs keep the defaults); the evidence
        plot only where the test reads it."""
        config = user.home / ".config" / "guarded-sbatch" / "config.toml"
        self.write_as(user, config, '[sidecar]\nfast_interval_seconds = 1.0\njob_poll_seconds = 5.0\nmem = "400M"\n'
                      f"evidence_plot = {str(evidence_plot).lower()}\n", mode="600")

    def write_as(self, user: User, path: Path, text: str, mode: str = "664") -> None:
        """A file written by `user` (so owned by them), as a co-worker would plant it."""
        result = self.run(user, ["sh", "-c", f'mkdir -p "$(dirname "$1")" && cat > "$1" && chmod {mode} "$1"', "sh",
                                 str(path)], input_text=text)
        assert result.returncode == 0, result.stderr


def _useradd(name: str, group: str, home: Path) -> User:
    subprocess.run(["useradd", "-M", "-d", str(home), "-s", "/bin/bash", "-U", "-G", group, name],
                   check=True, timeout=30, capture_output=True)
    entry = pwd.getpwnam(name)
    home.mkdir(mode=0o700)
    os.chown(home, entry.pw_uid, entry.pw_gid)
    return User(name, entry.pw_uid, entry.pw_gid, home)


def _shared_python(base: Path) -> Path:
    """A virtual environment other users can run: the test interpreter's own may live in root's private home, so
    its files are hard-linked (no copy, same inodes, root's and read-only) under `base`, and the venv's
    site-packages is the project venv's. Returns its `python`; `guarded-sbatch` beside it is the entry point
    as pip writes it."""
    home = Path(sys.base_prefix)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    interpreter = base / "python"
    (interpreter / "bin").mkdir(parents=True)
    (interpreter / "lib").mkdir()
    os.link(os.path.realpath(home / "bin" / version), interpreter / "bin" / version)
    for library in (home / "lib").glob("libpython*.so*"):
        if library.is_file() and not library.is_symlink():
            os.link(library, interpreter / "lib" / library.name)
        elif library.is_symlink():
            os.symlink(os.readlink(library), interpreter / "lib" / library.name)
    stdlib = interpreter / "lib" / version
    stdlib.mkdir()
    # the standard library only: not the base interpreter's own packages (pyenv's may hold tens of thousands of
    # files) nor its test suite
    parts = [str(p) for p in (home / "lib" / version).iterdir() if p.name not in ("site-packages", "dist-packages", "test")]
    subprocess.run(["cp", "-al", *parts, str(stdlib)], check=True, timeout=60)
    (stdlib / "site-packages").mkdir()
    venv = base / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "lib" / version).mkdir(parents=True)
    os.symlink(Path(sys.prefix) / "lib" / version / "site-packages", venv / "lib" / version / "site-packages")
    (venv / "pyvenv.cfg").write_text(f"home = {interpreter / 'bin'}\ninclude-system-site-packages = false\n"
                                     f"version = {'.'.join(map(str, sys.version_info[:3]))}\n")
    python = venv / "bin" / "python"
    os.symlink(interpreter / "bin" / version, python)
    entry = venv / "bin" / "guarded-sbatch"
    entry.write_text(f"#!{python}\nimport sys\nfrom guarded_sbatch.cli.main import main\nsys.exit(main())\n")
    entry.chmod(0o755)
    return python


def _kill_leftovers(user: str) -> None:
    """End what the test left running as `user` (a throwaway user: every process of it is the test's), by pid."""
    listed = subprocess.run(["pgrep", "-u", user], capture_output=True, text=True, timeout=30)
    for pid in listed.stdout.split():
        try:
            os.kill(int(pid), 9)
        except (ProcessLookupError, ValueError):
            pass


@pytest.fixture(scope="module", name="shared_cluster")
def shared_cluster_fixture() -> Iterator[SharedCluster]:
    """Import it into a test module (`from shared_cluster import shared_cluster_fixture`) and ask for
    `shared_cluster`."""
    require(os.geteuid() == 0, "needs root to create two throwaway Unix users")
    require(shutil.which("useradd") is not None and shutil.which("setpriv") is not None, "needs useradd and setpriv")
    tag = uuid.uuid4().hex[:6]
    base = Path(f"/tmp/gsb-shared-{tag}")
    base.mkdir(mode=0o755)
    os.chmod(base, 0o755)
    group = f"gsbp{tag}"
    users: list[str] = []
    try:
        subprocess.run(["groupadd", group], check=True, timeout=30, capture_output=True)
        gid = grp.getgrnam(group).gr_gid
        (base / "home").mkdir(mode=0o755)
        victim = _useradd(f"gsbv{tag}", group, base / "home" / "victim")
        users.append(victim.name)
        coworker = _useradd(f"gsbc{tag}", group, base / "home" / "coworker")
        users.append(coworker.name)
        project = base / "project"
        project.mkdir()
        os.chown(project, 0, gid)
        os.chmod(project, 0o2775)
        yield SharedCluster(base, group, gid, project, victim, coworker, _shared_python(base))
    finally:
        for name in users:
            _kill_leftovers(name)
        for name in users:
            subprocess.run(["userdel", name], timeout=30, capture_output=True)
        subprocess.run(["groupdel", group], timeout=30, capture_output=True)
        shutil.rmtree(base, ignore_errors=True)
