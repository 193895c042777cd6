"""`guarded-sbatch run [guard options] [--guard-tmux NAME] -- COMMAND...`: a guarded run on a workstation
or an interactive node, without a batch script.

The pre-flight reads the command line itself (`python train.py ...`, `accelerate launch ...`, `torchrun ...`,
`deepspeed ...`) as the launcher line of a one-line script. A clean (or waived) launch then runs as a job of
the local backend, with its watcher as a second local job (`after:` the first), recorded in the registry like
any guarded run, so `status`, `kill` and `restart` work on it. With --guard-tmux NAME the command runs in a
new detached tmux session NAME (its output tee'd to a log the watcher reads); the local job lasts as long
as the session, and the watcher stops the run by interrupting, then killing, the session.

`guarded-sbatch stop TARGET` is cli/stop.py.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from guarded_sbatch.core import door
from guarded_sbatch.core.errors import BlockedError, ExitCode, UsageError
from guarded_sbatch.core.pychild import python_argv
from guarded_sbatch.core.redact import redact
from guarded_sbatch.core.waiting import Waiting, tell

if TYPE_CHECKING:
    from guarded_sbatch.core.config import Config
    from guarded_sbatch.sbatch.argv import LaunchArgs
    from guarded_sbatch.launch.preflight import PreflightReport
    from guarded_sbatch.launch.results import CheckResult
    from guarded_sbatch.scheduler.interface import Scheduler

RUN_USAGE = ("usage: guarded-sbatch run [guard options] [--job-name NAME] [--time LIMIT] [--guard-tmux NAME] "
             "-- COMMAND...  (e.g. -- python train.py --config c.yaml)")
RUN_HELP = """usage: guarded-sbatch run [options] -- COMMAND...

A guarded run here, on a workstation or an interactive node, without a batch
script: the pre-flight reads COMMAND as a launcher line; a clear (or waived)
run starts in the background as a job of the local backend, with its watcher
beside it, and shows in `guarded-sbatch status` like a Slurm job (`show`,
`kill`, `restart` work on it). Exit 0 when started, 3 when blocked.

options (before --):
  --job-name NAME         the run's name (default: the program's, train.py ->
                          train)
  --time LIMIT            a time limit, as sbatch reads it (e.g. 2:00:00)
  --guard-tmux NAME       run COMMAND in a new detached tmux session NAME (its
                          output tee'd to a log the watcher reads); a STOP
                          interrupts, then ends, the session
{guard_options}

examples:
  guarded-sbatch run --job-name mnist-mlp-bs64-lr1e-3 -- python train.py \\
      --config configs/mnist.yaml
  guarded-sbatch run --guard-tmux train-a -- torchrun --nproc_per_node 2 \\
      train.py --config configs/big.yaml
"""


def run_help() -> str:
    """`guarded-sbatch run --help`: the guard options listed from their one table (sbatch/guard_options.py)."""
    from guarded_sbatch.sbatch.guard_options import usage_lines

    return RUN_HELP.replace("{guard_options}", "\n".join(usage_lines(width=26)))


TMUX_STOP_GRACE_S = 20.0  # the watcher's stop command must end within stop_run's 60 s


def run_under_guard(argv: list[str], *, check_only: bool = False, color: bool = False, clear_line: str = "") -> int:
    if argv[:1] in (["-h"], ["--help"]):  # before the pipeline loads: the help is a table's text
        print(run_help(), end="")
        return int(ExitCode.OK)
    from guarded_sbatch.core.config import load_config
    from guarded_sbatch.core.fsutil import private_dir, state_dir
    from guarded_sbatch.sbatch.argv import split_sbatch_argv
    from guarded_sbatch.launch.pipeline import check_launch, judge_table
    from guarded_sbatch.cli.launch import print_report
    from guarded_sbatch.scheduler.local import LocalScheduler

    if "--" not in argv:
        raise UsageError(f"the command to run goes after `--`; {RUN_USAGE}")
    split = argv.index("--")
    options, command = argv[:split], argv[split + 1:]
    if not command:
        raise UsageError(f"no command after `--`; {RUN_USAGE}")
    tmux, options = _take_tmux(options)
    if tmux and not check_only and "--guard-restart" in options:
        _wait_session_gone(tmux)  # the killed run's session may still be on its way out
    if tmux and not check_only and _tmux_session_exists(tmux):
        raise UsageError(f"tmux session {tmux} already exists: pick another --guard-tmux name or end that session")
    private_dir(state_dir() / "run-staging")
    staging = door.make_temp_dir(time.strftime("%Y%m%d-%H%M%S-"), state_dir() / "run-staging")
    script = staging / "command.sh"  # what the pre-flight reads; also the job itself without tmux
    door.write_new(script, "#!/bin/bash\n# written by guarded-sbatch run\nexport PYTHONUNBUFFERED=1\n"
                   f"exec {shlex.join(command)}\n", 0o700)
    launch = split_sbatch_argv([*options, str(script)])
    scheduler = LocalScheduler()  # `run --` is the local backend's front end: the command runs here
    if launch.guard_options.backend not in (None, scheduler.name):
        raise UsageError(f"`guarded-sbatch run` runs here ({scheduler.name} backend); for another backend use "
                         "guarded-sbatch [options] COMMAND")
    config = load_config()
    judge_table(config)  # a bad [judge] threshold is one line before anything runs
    words = ["guarded-sbatch", "run", *options, *(["--guard-tmux", tmux] if tmux else []), "--", *command]
    report = check_launch(launch, config, scheduler, command_line=shlex.join(words))
    report = dataclasses.replace(report, results=tuple(_run_wording(result) for result in report.results))
    print_report(report, launching=not check_only or bool(clear_line), clear_line=clear_line, color=color)
    if check_only or report.blocked:
        door.remove_own_temp_dir(staging)  # nothing runs from it
        if report.blocked and not check_only:
            raise BlockedError("launch blocked by the pre-flight: nothing was started; fix the failed checks above, "
                               "or waive one with --guard-waive CHECK=\"REASON\"")
        return int(ExitCode.BLOCKED if report.blocked else ExitCode.OK)
    job_script, stop_command, log = script, None, None
    plan = report.source_plan
    if tmux:
        job_script, log = _tmux_job(staging, tmux, command, dict(plan.env) if plan is not None else {})
        stop_command = shlex.join([*python_argv("-m", "guarded_sbatch"), "stop", f"tmux:{tmux}",
                                   "--grace", str(TMUX_STOP_GRACE_S)])
    return _start(launch, report, config, scheduler, job_script, command, tmux, log, stop_command)


def _run_wording(result: CheckResult) -> CheckResult:
    """The pre-flight reads the command as a one-line script (command.sh): a run has no script name to fall back on."""
    prefix = "no run name: sbatch would call it 'command.sh'; set --job-name"
    if result.finding.startswith(prefix):
        hint = result.finding[len(prefix):]
        return dataclasses.replace(result, finding=f"no run name: give --job-name NAME before the --{hint}")
    return result


def _take_tmux(options: list[str]) -> tuple[str | None, list[str]]:
    rest: list[str] = []
    name: str | None = None
    index = 0
    while index < len(options):
        word = options[index]
        if word == "--guard-tmux" or word.startswith("--guard-tmux="):
            if "=" in word:
                name = word.partition("=")[2]
            elif index + 1 < len(options):
                index += 1
                name = options[index]
            else:
                raise UsageError("--guard-tmux needs a session name, e.g. --guard-tmux=train-a")
            if not name or any(ch in name for ch in ":. '\"$`\\"):
                raise UsageError(f"--guard-tmux {name!r}: use a plain session name (letters, digits, - and _)")
        else:
            rest.append(word)
        index += 1
    return name, rest


def _tmux_session_exists(name: str) -> bool:
    from guarded_sbatch.actions.stop_targets import tmux_session_exists

    return tmux_session_exists(name)


def _wait_session_gone(name: str, timeout_s: float = 2 * TMUX_STOP_GRACE_S + 10) -> None:
    deadline = time.monotonic() + timeout_s
    with Waiting(f"the restarted run's old tmux session {name} to end (at most {timeout_s:.0f} s)"):
        while _tmux_session_exists(name) and time.monotonic() < deadline:
            time.sleep(0.5)


def _tmux_job(staging: Path, session: str, command: list[str], env: dict[str, str]) -> tuple[Path, Path]:
    """The local job of a tmux run: start the session, live as long as it does, exit with the command's
    status; cancelled, it stops the session (detached, so the job's own SIGKILL cannot cut that short).
    `env` (the run's W&B id, MLflow tag) is exported inside the session: a tmux server that is already running
    gives a new session its own environment, not the job's."""
    log, status = staging / "output.log", staging / "exit-status"
    inner = staging / "in-tmux.sh"
    exports = "".join(f"export {name}={shlex.quote(value)}\n" for name, value in env.items())
    door.write_new(
        inner, "#!/bin/bash\n# guarded-sbatch run: the command, inside its tmux session\nexport PYTHONUNBUFFERED=1\n"
        f"{exports}cd {shlex.quote(os.getcwd())}\n{shlex.join(command)} 2>&1 | tee -a {shlex.quote(str(log))}\n"
        f"echo \"${{PIPESTATUS[0]}}\" > {shlex.quote(str(status))}\n", 0o700)
    stopper = shlex.join([*python_argv("-m", "guarded_sbatch"), "stop", f"tmux:{session}",
                          "--grace", str(TMUX_STOP_GRACE_S)])
    outer = staging / "tmux-job.sh"
    door.write_new(outer, f"""#!/bin/bash
# guarded-sbatch run: the local job of tmux session {session}
stop() {{ setsid {stopper} >> {shlex.quote(str(staging / 'stop.log'))} 2>&1 < /dev/null & wait $!; exit 143; }}
trap stop TERM INT
env -u TMUX tmux new-session -d -s {shlex.quote(session)} "bash {shlex.quote(str(inner))}" || exit 1
echo "guarded-sbatch run: tmux session {session}; attach with: tmux attach -t {session}"
while tmux has-session -t ={shlex.quote(session)} 2>/dev/null; do sleep 1 & wait $!; done
exit "$(cat {shlex.quote(str(status))} 2>/dev/null || echo 1)"
""", 0o700)
    door.write_new(log, b"", 0o600)
    return outer, log


def _start(launch: LaunchArgs, report: PreflightReport, config: Config, scheduler: Scheduler, job_script: Path,
           command: list[str], tmux: str | None, log: Path | None, stop_command: str | None) -> int:
    """Submit the command through the one launch pipeline (launch/pipeline.py), as the sbatch form is: named after
    its program when it has no name, its output read from the tmux log when it runs in tmux."""
    from guarded_sbatch.launch.pipeline import carry_out, follow_line, plan_launch

    plan = plan_launch(
        launch, report, config, launched_by="run", script=job_script,
        run_name=_program_stem(command), name_job=True,
        stop_command=stop_command,
        output_log=log,
        # what `restart` repeats: restart_launch_argv() gives [guard words] [options] -- COMMAND...
        replay=(command[0], tuple(command[1:]), (*launch.sbatch_options, *([f"--guard-tmux={tmux}"] if tmux else []))),
    )
    try:
        launched = carry_out(plan, scheduler, config)
    except KeyboardInterrupt:  # held from the job's submission to its watcher's: after it, both run
        print("guarded-sbatch: interrupted while starting; if a run started, `guarded-sbatch status` shows it "
              "(`guarded-sbatch kill RUN` stops it)", file=sys.stderr)
        return int(ExitCode.INTERRUPTED)
    for warning in launched.warnings:
        print(f"guarded-sbatch: {warning}", file=sys.stderr)
    submission = launched.submission
    print(submission.job_id)
    if submission.interrupted:
        print(f"guarded-sbatch: interrupted while starting; the interrupt was held until local job {submission.job_id} "
              f"had its watcher: both run (`guarded-sbatch kill {submission.job_id}` stops them)", file=sys.stderr)
        return int(ExitCode.INTERRUPTED)
    where = f"in tmux session {tmux} (tmux attach -t {tmux})" if tmux else "as a local process group"
    record = submission.record
    tell(f"guarded-sbatch: running `{redact(shlex.join(command))}` {where} in the background as local job "
         f"{submission.job_id}; its watcher is local job {submission.sidecar_id}; run folder {record.folder}")
    tell(follow_line(str(record.sources.get("stdout") or ""), record.run_id))
    return int(ExitCode.OK)


def _program_stem(command: list[str]) -> str:
    """A run without a name (run-name waived) is named after its program: `python train.py` → train."""
    words = [w for w in command if not w.startswith("-")]
    program = next((w for w in words[1:] if w.endswith(".py")), words[0] if words else "run")
    return Path(program).stem or "run"
