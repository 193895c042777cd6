"""Helpers (no tests) for the site-enforcement tests: Lmod in a bash subprocess, a copy of the modulefile as a
site admin would set it, the Lua interpreter for the plugins' shared library."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import uuid
from pathlib import Path


REPO = Path(__file__).resolve().parents[1]
LMOD_INIT = Path("/usr/share/lmod/lmod/init/bash")
PLUGINS = REPO / "wrapper" / "guarded_sbatch" / "site" / "lua"
LUA_CANDIDATES = ("lua5.1", "lua5.3", "lua")


from conftest import require  # noqa: E402  (re-exported: the site tests import it from here)


def lua_interpreter() -> str:
    found = next((shutil.which(name) for name in LUA_CANDIDATES if shutil.which(name)), None)
    require(found is not None, "no lua interpreter")
    return str(found)


def admin_modulefile(tmp_path: Path, site_config: Path) -> Path:
    """A modulepath holding the repository's Lmod modulefile with the admin settings filled in."""
    text = (REPO / "modulefiles" / "guarded-sbatch" / "0.1.0.lua").read_text()
    replacements = {
        "local install_root = nil": f"local install_root = {_lua(str(REPO))}",
        "local site_config  = nil": f"local site_config  = {_lua(str(site_config))}",
    }
    for old, new in replacements.items():
        assert old in text, f"modulefile lost its admin setting {old!r}"
        text = text.replace(old, new)
    modulepath = tmp_path / "modulefiles"
    (modulepath / "guarded-sbatch").mkdir(parents=True)
    (modulepath / "guarded-sbatch" / "0.1.0.lua").write_text(text)
    return modulepath


def _lua(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def with_module(modulepath: Path, commands: str, *, module: str = "guarded-sbatch", cwd: Path,
                env: dict[str, str], timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """`source lmod; module use DIR; module load NAME; <commands>` in a real bash."""
    require(LMOD_INIT.is_file(), f"Lmod not installed ({LMOD_INIT} missing)")
    script = (f"source {LMOD_INIT}\nmodule use {shlex.quote(str(modulepath))}\n"
              f"module load {module} || exit 90\n{commands}\n")
    return subprocess.run(["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def site_config(tmp_path: Path, *, policy: str = "reject", extra: str = "") -> Path:
    path = tmp_path / "site.toml"
    path.write_text(
        'locked = ["checks.mandatory", "enforcement"]\n'
        '[checks]\nmandatory = ["run-name"]\n'
        f'[enforcement]\nunguarded_training = "{policy}"\n{extra}',
        encoding="utf-8",
    )
    return path


def scontrol_text(job_id: str) -> str:
    out = subprocess.run(["scontrol", "-o", "show", "job", job_id], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout


def cancel(*job_ids: str) -> None:
    ids = [j for j in job_ids if j]
    if ids:
        subprocess.run(["scancel", *ids], capture_output=True, text=True, timeout=30)


def unique_name() -> str:
    """A run name the pre-flight accepts and no other test on the shared cluster uses."""
    return f"synthetic-tanh-mlp-site{uuid.uuid4().hex[:8]}"
