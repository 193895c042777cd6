"""`sbatch` as the guarded-sbatch module puts it first on PATH: shims/sbatch runs `python -m guarded_sbatch.cli.shim`.

The decision (guard or hand to the real sbatch) is site/shim_decision.py's; this module prints and execs.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from guarded_sbatch.cli.main import main as guarded_sbatch_main
from guarded_sbatch.records.audit import AuditLog
from guarded_sbatch.core.config import load_config
from guarded_sbatch.core.errors import CommandError, ExitCode, GuardedError
from guarded_sbatch.core.fsutil import write_text_atomic
from guarded_sbatch.core.runner import replace_process
from guarded_sbatch.site.shim_decision import (
    REAL_SBATCH_ENV,
    SHIM_ACTIVE_ENV,
    SHIM_PATH_ENV,
    decide,
    find_real_sbatch,
    training_commands_cache,
    training_commands_cache_text,
)


def _refresh_fast_path_cache() -> None:
    """Write the site's training_commands for the bash fast path; best effort (no cache: Python decides)."""
    try:
        text = training_commands_cache_text(os.environ)
        if text is not None:
            write_text_atomic(training_commands_cache(os.environ), text)
    except (GuardedError, OSError):
        pass


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    shim = Path(os.environ[SHIM_PATH_ENV]) if os.environ.get(SHIM_PATH_ENV) else None
    try:
        real = find_real_sbatch(os.environ, shim)
        guard, why = decide(args, os.environ)
    except GuardedError as exc:
        print(f"sbatch (guarded-sbatch shim): error: {exc.message}", file=sys.stderr)
        return int(exc.exit_code)
    except Exception as exc:  # noqa: BLE001 - a bug here must not stop every submission: sbatch (and job_submit) still judge it
        print(f"sbatch (guarded-sbatch shim): internal error ({type(exc).__name__}: {exc}); the job goes to sbatch "
              "unchecked; please report this to your site admin", file=sys.stderr)
        guard, why = False, "shim error"
    if guard and not site_enabled():
        guard, why = False, "guarded-sbatch is switched off by the site (enabled = false in the site config)"
    _refresh_fast_path_cache()
    if os.environ.get("GUARDED_SBATCH_SHIM_DEBUG"):
        print(f"guarded-sbatch shim: {'pre-flight' if guard else 'real sbatch'}: {why}", file=sys.stderr)
    if not guard and is_bypass(why):
        audit_bypass(args, why)
    if not guard:
        sys.stdout.flush()
        # exec, not a subprocess: the script may come on stdin, and stdout / exit code must be sbatch's own
        try:
            replace_process([str(real), *args])
        except CommandError as exc:
            print(f"sbatch (guarded-sbatch shim): error: {exc}", file=sys.stderr)
            return int(ExitCode.SBATCH_NOT_RUN)
    os.environ[SHIM_ACTIVE_ENV] = str(os.getpid())
    os.environ[REAL_SBATCH_ENV] = str(real)
    return guarded_sbatch_main(args)


BYPASS_WORDS = ("training", "marker", "shim error", "switched off")


def is_bypass(why: str) -> bool:
    """A job the shim let past the pre-flight that an admin would want to know about: training by --wrap,
    a script carrying a (possibly copied) marker, a shim error, the site switch-off."""
    return any(word in why for word in BYPASS_WORDS) and "no training launcher" not in why


def site_enabled() -> bool:
    try:
        return load_config().enabled
    except GuardedError:
        return True  # a broken user config must not switch the guard off; the launch reports it


def audit_bypass(args: list[str], why: str) -> None:
    try:
        problem = AuditLog.from_config(load_config()).record("shim_bypass", reason=why, argv=shlex.join(args))
    except GuardedError:
        return
    if problem:
        print(f"sbatch (guarded-sbatch shim): warning: audit record not written ({problem})", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
