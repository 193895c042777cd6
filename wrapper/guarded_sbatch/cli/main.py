"""The command line. The only layer that prints; every error becomes one line and an exit code.

stdout carries only what sbatch would print (or --json output); everything for people goes to stderr.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence

from guarded_sbatch import __version__
from guarded_sbatch.core.errors import ExitCode, GuardedError

USAGE = f"""\
usage: guarded-sbatch [guard options] [sbatch options] script.sh [script args]
       guarded-sbatch [guard options] [sbatch options] torchrun|accelerate|deepspeed|python ARGS...
       guarded-sbatch check [guard options] [sbatch options] script.sh [script args] [--json]
       guarded-sbatch monitor [--once] [--json] [--tb PATH] [--wandb PATH] [--log PATH] [--job ID] [PATH]
       guarded-sbatch status [--json]
       guarded-sbatch kill RUN [--yes]
       guarded-sbatch restart RUN [--yes] [guard options]
       guarded-sbatch --version | --help

A drop-in for sbatch: runs the launch pre-flight (config diff, run name, paths, tracker, ETA),
blocks on a failed check unless you waive it, then submits the job unchanged plus a sidecar job
that watches its metrics and stops it when it breaks.

guard options (before the script; sbatch has none of these):
  --guard-waive CHECK=REASON    waive a failed check (config-diff, run-name, paths, monitoring, eta)
  --guard-reference PATH        the reference run's config to diff against
  --guard-config PATH           the intended run's config, when the launcher line does not name it
  --guard-run-name NAME         the run name, when --job-name does not give it
  --guard-epochs N, --guard-seconds-per-epoch S   for the ETA
  --guard-restart               this is a restart: the name and output folder may exist
  --guard-tb PATH, --guard-wandb PATH, --guard-log PATH   where the sidecar reads metrics
                                (default: discovered in the job's working folder)
  --guard-stop-command CMD      how the sidecar stops the run (default: cancel the job)
  --guard-notes PATH            the project notes file the sidecar appends to on STOP
  --guard-backend slurm|local   where jobs run (default: slurm when sbatch answers, else local)
  --guard-checkpoint-dir PATH, --guard-artifact-dir PATH   the run's folders (kill/restart purge them)
  --guard-print-script          with a launcher command: print the batch script it renders; submit nothing
  --guard-signal-margin S, --guard-max-requeues N   USR1 S seconds before the time limit, then the job
                                checkpoints and requeues itself up to N times (launcher commands)

With a launcher command instead of a script, guarded-sbatch writes the batch script itself from
sbatch_templates/ (rendezvous, one task per node, signal before the limit, requeue), checks it
with the same pre-flight, and submits it; e.g.
  guarded-sbatch --nodes 2 --gpus-per-node 8 --time 12:00:00 torchrun train.py --config configs/x.yaml

environment: GUARDED_SBATCH_SITE_CONFIG (site config, set by the module),
  GUARDED_SBATCH_USER_CONFIG, GUARDED_SBATCH_BACKEND, GUARDED_SBATCH_STATE_DIR, NO_COLOR

{ExitCode.help_text()}
"""

SUBCOMMANDS = ("check", "monitor", "status", "kill", "restart", "sidecar", "admin")


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        return dispatch(args)
    except GuardedError as exc:
        print(f"guarded-sbatch: error: {exc.message}", file=sys.stderr)
        return int(exc.exit_code)
    except KeyboardInterrupt:
        print("guarded-sbatch: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return int(ExitCode.OK)
    except Exception as exc:  # noqa: BLE001 - a bug: one line for people, the traceback on request
        if os.environ.get("GUARDED_SBATCH_DEBUG"):
            raise
        print(f"guarded-sbatch: internal error: {type(exc).__name__}: {exc} "
              "(a bug: rerun with GUARDED_SBATCH_DEBUG=1 for the traceback and report it)", file=sys.stderr)
        return int(ExitCode.INTERNAL)


def dispatch(args: list[str]) -> int:
    if not args or args[0] in ("-h", "--help"):
        print(USAGE, file=sys.stdout if args else sys.stderr, end="")
        return int(ExitCode.OK if args else ExitCode.USAGE)
    if args[0] in ("-V", "--version"):
        print(f"guarded-sbatch {__version__}")
        return int(ExitCode.OK)
    command = args[0] if args[0] in SUBCOMMANDS else None
    handlers: dict[str | None, Callable[[list[str]], int]] = {
        None: lambda a: _launch(a, check_only=False),
        "check": lambda a: _launch(a, check_only=True),
        "monitor": _monitor,
        "sidecar": _sidecar,
        "status": _status,
        "kill": _kill,
        "restart": _restart,
        "admin": _admin,
    }
    return handlers[command](args if command is None else args[1:])


def use_color(stream: object) -> bool:
    return bool(getattr(stream, "isatty", lambda: False)()) and "NO_COLOR" not in os.environ


def _launch(args: list[str], *, check_only: bool) -> int:
    from guarded_sbatch.cli.launch import run_launch

    return run_launch(args, check_only=check_only, color=use_color(sys.stderr))


def _monitor(args: list[str]) -> int:
    from guarded_sbatch.cli.monitor import run_monitor

    return run_monitor(args)


def _sidecar(args: list[str]) -> int:
    from guarded_sbatch.cli.monitor import run_sidecar_command

    return run_sidecar_command(args)


def _status(args: list[str]) -> int:
    from guarded_sbatch.cli.lifecycle import run_status

    return run_status(args, color=use_color(sys.stdout))


def _kill(args: list[str]) -> int:
    from guarded_sbatch.cli.lifecycle import run_kill

    return run_kill(args)


def _restart(args: list[str]) -> int:
    from guarded_sbatch.cli.lifecycle import run_restart

    return run_restart(args)


def _admin(args: list[str]) -> int:
    from guarded_sbatch.cli.admin import run_admin

    return run_admin(args)
