"""The decision of the `sbatch` shim (cli/shim.py runs it; shims/sbatch starts that).

A training job (a launcher line the site's policy counts, see site/enforcement.py) goes through guarded-sbatch:
pre-flight report on stderr, blocked → exit 3, else `Submitted batch job N` on stdout as sbatch prints it.
Everything else — no launcher line, --wrap without training, a script on stdin, --test-only, --help, a
submission that already carries a valid guarded-sbatch marker — is handed to the real sbatch untouched
(exec: same stdin, stdout, stderr and exit code), so submitit and other tools that call `sbatch` keep working.

Recursion: while guarded-sbatch runs for the shim, GUARDED_SBATCH_SHIM_ACTIVE holds its process id, and
shims/sbatch execs the real sbatch straight away for a child of that process. The real sbatch is
GUARDED_SBATCH_REAL_SBATCH (set by the module), else the first `sbatch` on PATH that is not this shim.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from guarded_sbatch.core.config_files import SITE_CONFIG_ENV, SYSTEM_SITE_CONFIG
from guarded_sbatch.core.errors import UsageError
from guarded_sbatch.sbatch.argv import split_sbatch_argv
from guarded_sbatch.sbatch.script import parse_script, parse_wrap, read_script_text
from guarded_sbatch.launch.marking import is_guarded, user_comment
from guarded_sbatch.site.enforcement import load_policy, training_reason

REAL_SBATCH_ENV = "GUARDED_SBATCH_REAL_SBATCH"
SHIM_ACTIVE_ENV = "GUARDED_SBATCH_SHIM_ACTIVE"
SHIM_PATH_ENV = "GUARDED_SBATCH_SHIM"  # shims/sbatch exports its own path here


def _same_file(a: Path, b: Path | None) -> bool:
    try:
        return b is not None and a.resolve() == b.resolve()
    except OSError:
        return False


def find_real_sbatch(env: Mapping[str, str], shim: Path | None) -> Path:
    """The real sbatch: the configured one, else the first on PATH that is not the shim."""
    configured = env.get(REAL_SBATCH_ENV)
    if configured:
        path = Path(configured)
        if path.is_file() and os.access(path, os.X_OK) and not _same_file(path, shim):
            return path
        raise UsageError(f"{REAL_SBATCH_ENV}={configured} is not Slurm's sbatch (missing, not executable, or this "
                         "shim); ask your site admin to fix the guarded-sbatch module")
    for folder in env.get("PATH", "").split(os.pathsep):
        candidate = Path(folder or ".") / "sbatch"
        if candidate.is_file() and os.access(candidate, os.X_OK) and not _same_file(candidate, shim):
            return candidate
    raise UsageError(f"cannot find Slurm's sbatch on PATH besides this shim; set {REAL_SBATCH_ENV}=/usr/bin/sbatch")


def decide(argv: list[str], env: Mapping[str, str]) -> tuple[bool, str]:
    """(guard?, why): whether this sbatch command line is an unguarded training job to pre-flight."""

    try:
        launch = split_sbatch_argv(argv)
    except UsageError as exc:
        return False, f"not a command line guarded-sbatch reads ({exc.message}): sbatch decides"
    if launch.guard_words:
        return True, "--guard-* options given"
    names = {option.name for option in launch.parsed_options}
    if launch.info_only or "test-only" in names:
        return False, "no job is created"
    policy = load_policy(env=env)
    wrap = next((option.value for option in launch.parsed_options if option.name == "wrap"), None)
    if wrap is not None:
        reason = training_reason(parse_wrap(wrap, env), policy)
        if reason and policy.unguarded_training == "reject":
            raise UsageError(f"--wrap starts training ({reason}) without the pre-flight, which this site requires: "
                             "put the command in a script and submit it with `guarded-sbatch [options] script.sh`")
        return False, f"--wrap job ({'training, ' + reason if reason else 'no training launcher'})"
    if launch.script is None:
        return False, "script on stdin: sbatch and the site's job_submit plugin decide"
    try:
        text = read_script_text(launch.script)
        parsed = parse_script(launch.script, env)
    except UsageError as exc:
        return False, f"sbatch will judge the script ({exc.message})"
    if is_guarded(user_comment(launch.parsed_options, text, launch.script), text.encode("utf-8")):
        return False, "already carries guarded-sbatch's marker for this script"
    reason = training_reason(parsed, policy)
    return (True, f"training job ({reason})") if reason else (False, "no training launcher line")


def training_commands_cache(env: Mapping[str, str]) -> Path:
    """Where the bash fast path of shims/sbatch reads the site's training_commands (see shims/sbatch)."""
    base = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME") or "/tmp") / ".cache")
    return Path(base) / "guarded-sbatch" / "shim-training-commands"


def training_commands_cache_text(env: Mapping[str, str]) -> str | None:
    """The cache's content for the current site config: `site=<path>` then one training command per line;
    None without a site config (the fast path then needs no cache)."""

    named = env.get(SITE_CONFIG_ENV, "")
    sites = [named] if named else []
    if SYSTEM_SITE_CONFIG.is_file() and not (named and _same_path(named, SYSTEM_SITE_CONFIG)):
        sites.append(str(SYSTEM_SITE_CONFIG))  # always read: the shim's fast path checks its commands too
    if not sites:
        return None
    policy = load_policy(env=env)
    if any("\n" in needle for needle in policy.training_commands):
        return None  # a needle the line-based cache cannot hold: no cache, so every call goes to Python
    return "\n".join([f"site={':'.join(sites)}", *policy.training_commands]) + "\n"


def _same_path(a: str, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False
