"""`guarded-sbatch admin ...`: the site admin's commands.

    guarded-sbatch admin render-policy SITE.toml [OUT.lua]
        the [enforcement] policy as Lua for Slurm's plugins
    guarded-sbatch admin plugin-dir
        where the Lua plugins of this install are
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

from guarded_sbatch.core.errors import ExitCode, GuardedError, UsageError
from guarded_sbatch.core.fsutil import write_public_atomic
from guarded_sbatch.site.enforcement import load_policy, render_lua_policy

USAGE = __doc__.split("\n\n", 1)[1] if __doc__ else ""


def plugin_dir() -> Path:
    return Path(str(resources.files("guarded_sbatch.site") / "lua"))


def run_admin(argv: Sequence[str]) -> int:
    args = list(argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE, end="", file=sys.stdout if args else sys.stderr)
        return int(ExitCode.OK if args else ExitCode.USAGE)
    command, rest = args[0], args[1:]
    if command == "plugin-dir" and not rest:
        print(plugin_dir())
        return int(ExitCode.OK)
    if command == "render-policy" and 1 <= len(rest) <= 2:
        text = render_lua_policy(load_policy(Path(rest[0])))
        if len(rest) == 2:
            try:
                # users' sbatch runs cli_filter as the user: the policy must be readable by all (and complete)
                write_public_atomic(Path(rest[1]), text)
            except OSError as exc:
                raise UsageError(f"cannot write {rest[1]}: {exc.strerror or exc}; check the folder and its permissions")
        else:
            sys.stdout.write(text)
        return int(ExitCode.OK)
    raise UsageError(f"usage: guarded-sbatch admin render-policy SITE.toml [OUT.lua] | plugin-dir (got {' '.join(args)!r})")


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return run_admin(sys.argv[1:] if argv is None else argv)
    except GuardedError as exc:
        print(f"guarded-sbatch: error: {exc.message}", file=sys.stderr)
        return int(exc.exit_code)


if __name__ == "__main__":
    sys.exit(main())
