"""`guarded-sbatch [sbatch options] script.sh [args]` and `guarded-sbatch check ...`."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from guarded_sbatch.core import door
from guarded_sbatch.core.errors import BlockedError, ExitCode, UsageError
from guarded_sbatch.core.jsonnum import dumps as json_dumps
from guarded_sbatch.core.redact import redact
from guarded_sbatch.core.suggest import near_file
from guarded_sbatch.core.waiting import fit, tell
from guarded_sbatch.launch.pipeline import choose_backend, follow_line, guarded_scheduler
from guarded_sbatch.scheduler import get_scheduler

if TYPE_CHECKING:
    from guarded_sbatch.core.config import Config
    from guarded_sbatch.sbatch.argv import LaunchArgs
    from guarded_sbatch.launch.launcher_job import LauncherJob
    from guarded_sbatch.launch.preflight import PreflightReport
    from guarded_sbatch.scheduler.interface import Scheduler

def run_check(argv: list[str], *, color: bool) -> int:
    """`guarded-sbatch check`: the pre-flight alone."""
    return run_launch(argv, check_only=True, color=color)


def run_launch(argv: list[str], *, check_only: bool, color: bool, show_report: bool = True,
               clear_line: str = "") -> int:
    """A launch (or with check_only, its pre-flight alone). clear_line replaces the report's last line when
    the launch is clear (restart: what happens next is the restart's, not a command to copy)."""
    from guarded_sbatch.core.config import load_config
    from guarded_sbatch.sbatch.argv import split_sbatch_argv
    from guarded_sbatch.launch.pipeline import judge_table

    launch = split_sbatch_argv(argv)
    refuse_own_options_after_script(launch, check_only=check_only)
    guard = launch.guard_options
    if guard.json and not check_only:
        raise UsageError("--json applies to `guarded-sbatch check` only (a launch prints what sbatch prints); "
                         "use `guarded-sbatch check --json [options] script.sh`, or --parsable for the job id alone")
    if launch.info_only and not check_only:
        return _pass_through_to_sbatch(launch.sbatch_options)
    if launch.script is None:
        raise UsageError("no batch script given: guarded-sbatch needs `[options] script.sh [args]` (--wrap is not guarded)")
    config = load_config()
    judge_table(config)  # a bad [judge] threshold is one line before anything runs
    # `guarded-sbatch [options] torchrun train.py ...`: a batch script is rendered from the launcher's template
    # and then checked and submitted like the user's own (launch/launcher_job.py)
    launcher_job = launcher_job_of(launch, config)
    if guard.print_script:
        sys.stdout.write(launcher_job.text if launcher_job else _script_text(launch.script))
        return int(ExitCode.OK)
    if launcher_job is None and not launch.script.is_file():
        where = "" if launch.script.is_absolute() else f" (relative to the folder you submit from, {Path.cwd()})"
        near = near_file(launch.script)
        fix = f"did you mean {near}?" if near else "check the path"
        raise UsageError(f"batch script {launch.script} not found{where}; {fix}")
    backend = choose_backend(config, guard.backend)
    command_line = launch
    if launcher_job is not None:
        launch = _use_rendered_script(launch, launcher_job, get_scheduler(backend))
    scheduler = guarded_scheduler(backend, _script(launch), launch.parsed_options)
    report = _preflight(launch, config, scheduler, launcher_job, command_line, check_only=check_only)
    _print_report(report, launch, check_only=check_only, show_report=show_report, clear_line=clear_line, color=color)
    if check_only:
        if guard.json:
            print(redact(json_dumps(report.to_json())))
        return int(ExitCode.BLOCKED if report.blocked else ExitCode.OK)
    if report.blocked:
        raise BlockedError(
            "launch blocked by the pre-flight: fix the failed checks above, or waive one with "
            "--guard-waive CHECK=\"REASON\""
        )
    if any(o.name == "test-only" for o in launch.parsed_options):  # sbatch's dry run: no job, no sidecar
        return _test_only(launch, scheduler)
    return _submit(launch, report, config, scheduler, keep_script=launcher_job is not None)


def _preflight(launch: LaunchArgs, config: Config, scheduler: Scheduler, launcher_job: LauncherJob | None,
               command_line: LaunchArgs, *, check_only: bool) -> PreflightReport:
    """The pre-flight's report on the launch (a rendered launcher script: checked, its command the user's)."""
    from guarded_sbatch.launch.pipeline import check_launch
    from guarded_sbatch.launch.preflight import launch_command

    try:
        return check_launch(launch, config, scheduler, restart=command_line.guard_options.restart,
                            command_line=launch_command(command_line) if launcher_job is not None else "")
    finally:
        if launcher_job is not None and check_only:
            door.remove(_script(launch))


def _print_report(report: PreflightReport, launch: LaunchArgs, *, check_only: bool, show_report: bool,
                  clear_line: str, color: bool) -> None:
    """The report on stderr, unless it is not wanted (sbatch's --quiet) and the launch is clear."""
    quiet = _has(launch, "quiet") and not check_only  # sbatch's --quiet: only errors (a blocked launch says why)
    if (show_report and not quiet) or report.blocked:
        print_report(report, launching=not check_only or bool(clear_line), clear_line=clear_line, color=color)


def print_report(report: PreflightReport, *, launching: bool, clear_line: str, color: bool) -> None:
    """The pre-flight's report on stderr, wrapped to the terminal's width (a pipe: one line per finding);
    clear_line replaces its last line when the launch is clear (restart: what follows is the restart's)."""
    import shutil

    from guarded_sbatch.launch.preflight import format_report

    width = shutil.get_terminal_size((80, 24)).columns if sys.stderr.isatty() else None
    text = format_report(report, color=color, launching=launching, width=width)
    if clear_line and not report.blocked:
        text = text.rsplit("\n", 1)[0] + "\n" + fit(clear_line, width)
    print(redact(text), file=sys.stderr)


def refuse_own_options_after_script(launch: LaunchArgs, *, check_only: bool) -> None:
    """sbatch's rule: every word after the script is the script's. Our own options there are almost surely
    meant for us, so say where they go instead of passing them on silently."""
    for word in launch.script_args:
        name = word.partition("=")[0]
        if name.startswith("--guard-") or (check_only and name == "--json"):
            script = launch.script
            command = "guarded-sbatch check" if check_only else "guarded-sbatch"
            raise UsageError(f"{name} comes after the script {script}, so it would be one of the script's own "
                             f"arguments (as in sbatch); put it before the script: `{command} {name} ... {script}`")


def _test_only(launch: LaunchArgs, scheduler: Scheduler) -> int:
    from guarded_sbatch.launch.pipeline import without_options
    from guarded_sbatch.scheduler.interface import SubmitRequest

    words = [*launch.sbatch_options, str(launch.script), *launch.script_args]
    if scheduler.traits.sbatch_native:
        return _pass_through_to_sbatch(tuple(words))
    from guarded_sbatch.scheduler.local import LocalScheduler

    request = SubmitRequest(script=_script(launch), sbatch_options=without_options(launch, {"wait", "quiet"}),
                            script_args=launch.script_args, workdir=Path.cwd())
    if not isinstance(scheduler, LocalScheduler):
        raise UsageError(f"--test-only is answered by sbatch or the local backend, not {scheduler.name}")
    print(scheduler.test_only(request), file=sys.stderr)
    return int(ExitCode.OK)


def launcher_job_of(launch: LaunchArgs, config: Config) -> LauncherJob | None:
    """The batch script to render when the launch names a launcher command (torchrun ...) instead of a script."""
    from guarded_sbatch.launch.launcher_job import build_launcher_job, launcher_command_of

    command = launcher_command_of(launch)
    return build_launcher_job(launch, command, config) if command else None


def _use_rendered_script(launch: LaunchArgs, launcher_job: LauncherJob, scheduler: Scheduler) -> LaunchArgs:
    from guarded_sbatch.launch.launcher_job import as_script_launch, staging_folder, write_job_script
    from guarded_sbatch.scheduler import backend_names, backend_traits

    if not scheduler.traits.multi_node and launcher_job.command.kind != "python":
        able = [name for name in backend_names() if backend_traits(name).multi_node]
        raise UsageError(f"a {launcher_job.command.kind} job needs job steps across nodes (srun, scontrol), which the "
                         f"{scheduler.name} backend has not; use --guard-backend {' or '.join(able)}, or give a python "
                         f"command for the {scheduler.name} backend")
    return as_script_launch(launch, write_job_script(launcher_job, staging_folder()))


def _script_text(script: Path) -> str:
    from guarded_sbatch.sbatch.script import read_script_text

    return read_script_text(script)


def _submit(launch: LaunchArgs, report: PreflightReport, config: Config, scheduler: Scheduler, *,
            keep_script: bool = False) -> int:
    """The launch through the one pipeline (launch/pipeline.py); what is printed around it is sbatch's."""
    from guarded_sbatch.launch.pipeline import carry_out, plan_launch

    parsable, quiet, wait = _has(launch, "parsable"), _has(launch, "quiet"), wants_wait(launch, scheduler)
    os.environ.pop("SBATCH_WAIT", None)  # sbatch itself must not block before the sidecar is submitted
    plan = plan_launch(launch, report, config, launched_by="cli", keep_script=keep_script)

    submitted: list[str] = []

    def announce(job_id: str) -> None:
        submitted.append(job_id)
        if not quiet:
            print(job_id if parsable else f"Submitted batch job {job_id}", flush=True)

    try:
        launched = carry_out(plan, scheduler, config, on_submitted=announce)
    except KeyboardInterrupt:
        if not submitted:
            raise
        # Ctrl-C is held from the job's submission until its guard's (launch/submit.py): both were submitted
        print(f"guarded-sbatch: interrupted after job {submitted[0]} and its guard were submitted: both run "
              f"(`guarded-sbatch status` shows them; `guarded-sbatch kill {submitted[0]}` stops them)", file=sys.stderr)
        return int(ExitCode.INTERRUPTED)
    for warning in launched.warnings:
        print(f"guarded-sbatch: {warning}", file=sys.stderr)
    submission, record = launched.submission, launched.submission.record
    watcher = "array watcher job" if submission.tasks else \
        "shared monitor job" if record.monitor_id else "sidecar job"
    if not quiet:
        tasks = f" ({len(launched.records)} tasks, a run each)" if submission.tasks else ""
        folders = f"run folders {str(record.folder).rsplit('_', 1)[0]}_*" if submission.tasks \
            else f"run folder {record.folder}"
        tell(f"guarded-sbatch: {watcher} {submission.sidecar_id} watches job {submission.job_id}{tasks}; {folders}")
        tell(follow_line(str(record.sources.get("stdout") or ""),
                         submission.job_id if submission.tasks else record.run_id, array=bool(submission.tasks)))
    if submission.interrupted:
        print(f"guarded-sbatch: interrupted while submitting; the interrupt was held until job {submission.job_id} "
              f"had its {watcher} {submission.sidecar_id}: both run (`guarded-sbatch kill {record.run_id}` "
              "stops them)", file=sys.stderr)
        return int(ExitCode.INTERRUPTED)
    if wait:
        return wait_for_job(scheduler, submission.job_id, quiet=quiet)
    return int(ExitCode.OK)


def _has(launch: LaunchArgs, name: str) -> bool:
    return any(o.name == name for o in launch.parsed_options)


def wants_wait(launch: LaunchArgs, scheduler: Scheduler) -> bool:
    """sbatch's --wait, from the command line, SBATCH_WAIT or an #SBATCH line. The job is submitted without it
    (sbatch would block before the sidecar is submitted) and guarded-sbatch waits itself, once the guard is in
    place; an #SBATCH --wait cannot be taken out of a script that is submitted unchanged, so Slurm refuses it."""
    from guarded_sbatch.sbatch.script import parse_script

    in_script = launch.script is not None and any(
        option.name == "wait" for d in parse_script(_script(launch), dict(os.environ)).directives for option in d.options)
    if in_script and scheduler.traits.sbatch_native:
        raise UsageError(f"{launch.script} has #SBATCH --wait, which would make sbatch block before the job's sidecar "
                         "is submitted; remove that line and give --wait on the command line instead")
    return in_script or _has(launch, "wait") or os.environ.get("SBATCH_WAIT", "") not in ("", "0")


def wait_for_job(scheduler: Scheduler, job_id: str, *, quiet: bool) -> int:
    """Block until the job ends and exit with its code, as `sbatch --wait` does (a signal: 128 + signal)."""
    import time

    from guarded_sbatch.core.errors import SchedulerError
    from guarded_sbatch.core.waiting import Waiting

    if not quiet:
        print(f"guarded-sbatch: waiting for job {job_id} to end (--wait); Ctrl-C stops waiting, the job and its "
              "guard go on", file=sys.stderr, flush=True)
    poll = scheduler.traits.wait_poll_s
    with Waiting(f"job {job_id} to end (--wait)", said=True, quiet=quiet) as told:
        while True:
            try:
                state = scheduler.state(job_id)
            except SchedulerError:
                state = None  # a controller hiccup: ask again
            if state is not None and state.is_terminal:
                break
            told.detail = f"{state.value} (`guarded-sbatch show {job_id}`: its guard's verdict so far)" if state \
                else "the scheduler did not answer; asking again"
            time.sleep(poll)
    code = scheduler.info(job_id).exit_code
    if not quiet:
        print(f"guarded-sbatch: job {job_id} ended: {state.value}", file=sys.stderr)
    if code is None:
        return int(ExitCode.OK if state.value == "COMPLETED" else ExitCode.NOTHING_TO_STOP)  # failed, no exit code
    return 128 - code if code < 0 else code


def _pass_through_to_sbatch(options: tuple[str, ...]) -> int:
    from guarded_sbatch.scheduler.slurm import sbatch_pass_through

    result = sbatch_pass_through(options)
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    return result.returncode


def _script(launch: LaunchArgs) -> Path:
    if launch.script is None:
        raise UsageError("nothing to submit: give a batch script (guarded-sbatch [options] script.sh)")
    return launch.script
