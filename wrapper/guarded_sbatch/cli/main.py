"""The command line. The only layer that prints; every error becomes one line and an exit code.

stdout carries only what sbatch would print (or --json output); everything for people goes to stderr.
"""

from __future__ import annotations

import difflib
import errno
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from guarded_sbatch import __version__
from guarded_sbatch.core.errors import ExitCode, GuardedError, UsageError
from guarded_sbatch.core.waiting import fit_prose, help_width, tell

_USAGE = f"""\
usage: guarded-sbatch [guard options] [sbatch options] script.sh [script args]
       guarded-sbatch [guard options] [sbatch options]
                      torchrun|accelerate|deepspeed|python ARGS...
       guarded-sbatch check [--json] [guard options] [sbatch options]
                      script.sh [script args]
       guarded-sbatch monitor [--once [--json]] [--tb PATH] [--wandb PATH]
                      [--log PATH] [--log-command CMD] [--job ID] [PATH]
                      [--stop tmux:S|pid:P|ssh:HOST[:PORT]:P|slurm:J]
       guarded-sbatch show RUN [--png FILE] [--plain] [--json]
       guarded-sbatch run [guard options] [--guard-tmux NAME] -- COMMAND...
                      (a workstation: no Slurm)
       guarded-sbatch check-sweep [guard options] sweep.yaml [--json]
       guarded-sbatch stop tmux:SESSION|pid:PID|ssh:HOST[:PORT]:PID [--grace S]
       guarded-sbatch status [--all] [--project DIR] [--state S,S]
                      [--name GLOB] [--json]
       guarded-sbatch kill RUN [--yes]
       guarded-sbatch restart RUN [--yes] [guard options]
       guarded-sbatch reference RUN
       guarded-sbatch --version | --help;  guarded-sbatch COMMAND --help

A drop-in for sbatch: runs the launch pre-flight (config diff, run name, paths,
tracker, ETA), blocks on a failed check unless you waive it, then submits the
job unchanged plus a sidecar job that watches its metrics and stops it when it
breaks.

guard options (before the script; sbatch has none of these):
{{guard_options}}

With a launcher command instead of a script, guarded-sbatch writes the batch
script itself from sbatch_templates/ (rendezvous, one task per node, signal
before the limit, requeue), checks it with the same pre-flight, and submits it;
e.g.
  guarded-sbatch --nodes 2 --gpus-per-node 8 torchrun train.py --config x.yaml

environment: GUARDED_SBATCH_SITE_CONFIG (site config, set by the module),
  GUARDED_SBATCH_USER_CONFIG, GUARDED_SBATCH_BACKEND, GUARDED_SBATCH_STATE_DIR,
  NO_COLOR

{ExitCode.help_text()}
"""


def usage() -> str:
    """`guarded-sbatch --help`: the guard options listed from their one table (sbatch/guard_options.py)."""
    from guarded_sbatch.sbatch.guard_options import usage_lines

    return _USAGE.replace("{guard_options}", "\n".join(usage_lines()))


@dataclass(frozen=True)
class Command:
    """A subcommand: where its handler lives (imported only when it runs) and, for those without an
    argparse parser of their own, the help `COMMAND --help` prints."""

    module: str
    function: str
    help: str = ""  # empty: the handler's own parser answers --help
    color_stream: str = ""  # "stdout" / "stderr": pass color= for that stream


# One row per subcommand (keep it a table: other branches add rows, e.g. run, check-sweep, reference).
COMMANDS: dict[str, Command] = {
    "check": Command("guarded_sbatch.cli.launch", "run_check", color_stream="stderr", help="""\
usage: guarded-sbatch check [--json] [guard options] [sbatch options] script.sh [script args]

The pre-flight alone: the report on stderr, nothing submitted; exit 3 when it would block the launch.
--json (before the script) also prints the report as one JSON object on stdout.
"""),
    "monitor": Command("guarded_sbatch.cli.monitor", "run_monitor"),
    "show": Command("guarded_sbatch.cli.show", "run_show"),
    "sidecar": Command("guarded_sbatch.cli.sidecar_job", "run_sidecar_command"),
    "status": Command("guarded_sbatch.cli.lifecycle", "run_status", color_stream="stdout"),
    "kill": Command("guarded_sbatch.cli.lifecycle", "run_kill", help="""\
usage: guarded-sbatch kill RUN [--yes]

Stop the run (training job and sidecar), then clean up in order: checkpoints, artifacts, tracker run.
RUN is a run id, job id or run name (see `guarded-sbatch status`). Asks for a typed "yes" on a
terminal; --yes goes ahead without asking.

exit codes: 0 killed and cleaned up; 1 nothing to stop (the run had already ended; its files were still
cleaned up); 2 bad usage or a cleanup step not done; 4 scheduler error
"""),
    "restart": Command("guarded_sbatch.cli.lifecycle", "run_restart", help="""\
usage: guarded-sbatch restart RUN [--yes] [guard options]

Run the pre-flight for a relaunch first (a blocked one deletes nothing), then stop and clean up the run
as `kill` does, and launch it again from its submit folder with its recorded options; the new run is
linked to the old one. Guard options (e.g. --guard-waive CHECK=REASON) apply to the relaunch.
"""),
    "admin": Command("guarded_sbatch.cli.admin", "run_admin"),  # answers --help itself
    "run": Command("guarded_sbatch.cli.run", "run_under_guard", color_stream="stderr"),
    "check-sweep": Command("guarded_sbatch.cli.check_sweep", "run_check_sweep", color_stream="stderr"),
    "stop": Command("guarded_sbatch.cli.stop", "run_stop"),
    "reference": Command("guarded_sbatch.cli.reference", "run_reference"),
}
SUBCOMMANDS = tuple(COMMANDS)
HELP_WORDS = ("-h", "--help")


class _RedactingStream:
    """stdout/stderr with secrets masked (core.redact) and control characters shown as escapes (core.sanitize):
    nothing this tool prints shows a secret, or makes the terminal act on a co-worker's ESC]0;... or ESC[2J."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def write(self, text: str) -> int:
        from guarded_sbatch.core.redact import redact
        from guarded_sbatch.core.sanitize import visible_keeping_colours

        self._inner.write(visible_keeping_colours(redact(text)))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    saved = sys.stdout, sys.stderr
    if not isinstance(sys.stdout, _RedactingStream):
        sys.stdout, sys.stderr = _RedactingStream(sys.stdout), _RedactingStream(sys.stderr)
    try:
        return _main(args)
    finally:
        sys.stdout, sys.stderr = saved


def _main(args: list[str]) -> int:
    try:
        return dispatch(args)
    except GuardedError as exc:
        tell(f"guarded-sbatch: error: {exc.message}")
        return int(exc.exit_code)
    except KeyboardInterrupt:
        print("guarded-sbatch: interrupted", file=sys.stderr)
        return int(ExitCode.INTERRUPTED)
    except BrokenPipeError:
        return int(ExitCode.OK)
    except (RecursionError, MemoryError) as exc:
        # Only input can do this (a config nested thousands deep, a script that expands without end).
        print(f"guarded-sbatch: error: the input is too deeply nested or too large to process "
              f"({type(exc).__name__}); simplify the config or script", file=sys.stderr)
        return int(ExitCode.USAGE)
    except OSError as exc:
        if exc.errno in (errno.ENAMETOOLONG, errno.ELOOP, errno.ENOTDIR, errno.EILSEQ):
            print(f"guarded-sbatch: error: {exc.strerror}: {str(exc.filename)[:120]!r}; give a shorter or valid path",
                  file=sys.stderr)
            return int(ExitCode.USAGE)
        return _internal(exc)
    except ValueError as exc:
        if "integer string conversion" in str(exc):  # a number thousands of digits long
            print("guarded-sbatch: error: a number in the input has thousands of digits; give a real value",
                  file=sys.stderr)
            return int(ExitCode.USAGE)
        return _internal(exc)
    except Exception as exc:  # a bug: one line for people, the traceback on request
        if os.environ.get("GUARDED_SBATCH_DEBUG"):
            raise
        print(f"guarded-sbatch: internal error: {type(exc).__name__}: {exc} "
              "(a bug: rerun with GUARDED_SBATCH_DEBUG=1 for the traceback and report it)", file=sys.stderr)
        return int(ExitCode.INTERNAL)


def _internal(exc: BaseException) -> int:
    if os.environ.get("GUARDED_SBATCH_DEBUG"):
        raise exc
    print(f"guarded-sbatch: internal error: {type(exc).__name__}: {exc} "
          "(a bug: rerun with GUARDED_SBATCH_DEBUG=1 for the traceback and report it)", file=sys.stderr)
    return int(ExitCode.INTERNAL)


def dispatch(args: list[str]) -> int:
    if not args or args[0] in HELP_WORDS:
        print(usage(), file=sys.stdout if args else sys.stderr, end="")
        return int(ExitCode.OK if args else ExitCode.USAGE)
    if args[0] in ("-V", "--version"):
        print(f"guarded-sbatch {__version__}")
        return int(ExitCode.OK)
    command = COMMANDS.get(args[0])
    if command is None:
        refuse_unknown_command(args[0])
        return _launch(args, check_only=False)
    rest = args[1:]
    if command.help and rest[:1] and rest[0] in HELP_WORDS:
        print(fit_prose(command.help, help_width()))
        return int(ExitCode.OK)
    handler: Callable[..., int] = getattr(importlib.import_module(command.module), command.function)
    if command.color_stream:
        return handler(rest, color=use_color(getattr(sys, command.color_stream)))
    return handler(rest)


def refuse_unknown_command(word: str) -> None:
    """`guarded-sbatch logs` / `stauts`: a first word that is no subcommand and no file (a folder, or a bare name
    with no file) is an unknown command, not a batch script; a path to a missing script stays the launch's to name."""
    if word.startswith("-") or os.path.isfile(word):
        return
    if ("/" in word or "." in word) and not os.path.isdir(word):
        return
    close = difflib.get_close_matches(word, SUBCOMMANDS, n=1, cutoff=0.7)
    hint = f" (did you mean `guarded-sbatch {close[0]}`?)" if close else ""
    raise UsageError(f"unknown command {word!r}{hint}; the commands are "
                     f"{', '.join(c for c in SUBCOMMANDS if c != 'sidecar')} (or give the batch script to submit)")


def use_color(stream: object) -> bool:
    return bool(getattr(stream, "isatty", lambda: False)()) and "NO_COLOR" not in os.environ


def _launch(args: list[str], *, check_only: bool) -> int:
    from guarded_sbatch.cli.launch import run_launch

    return run_launch(args, check_only=check_only, color=use_color(sys.stderr))
