"""`sbatch` as the guarded-sbatch module puts it first on PATH: shims/sbatch runs `python -m guarded_sbatch.cli.shim`.

The decision (guard or hand to the real sbatch) is site/shim.py's; this module prints and execs.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from guarded_sbatch.cli.main import main as guarded_sbatch_main
from guarded_sbatch.core.errors import GuardedError
from guarded_sbatch.core.fsutil import write_text_atomic
from guarded_sbatch.site.shim import (
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
    except Exception as exc:  # a bug here must not stop every submission: sbatch (and job_submit) still judge it
        print(f"sbatch (guarded-sbatch shim): internal error ({type(exc).__name__}: {exc}); the job goes to sbatch "
              "unchecked; please report this to your site admin", file=sys.stderr)
        guard, why = False, "shim error"
    _refresh_fast_path_cache()
    if os.environ.get("GUARDED_SBATCH_SHIM_DEBUG"):
        print(f"guarded-sbatch shim: {'pre-flight' if guard else 'real sbatch'}: {why}", file=sys.stderr)
    if not guard:
        sys.stdout.flush()
        # exec, not a subprocess: the script may come on stdin, and stdout / exit code must be sbatch's own
        os.execv(str(real), [str(real), *args])
    os.environ[SHIM_ACTIVE_ENV] = str(os.getpid())
    os.environ[REAL_SBATCH_ENV] = str(real)
    return guarded_sbatch_main(args)


if __name__ == "__main__":
    sys.exit(main())

