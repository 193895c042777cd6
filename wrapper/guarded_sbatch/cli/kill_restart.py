"""`guarded-sbatch kill RUN [--yes]` and `guarded-sbatch restart RUN [--yes] [guard options]`.

Both show the cleanup plan on stderr, ask for an interactive "yes" (or take --yes), stop the live run,
then clean up in the fixed order of actions/cleanup.py. Restart then relaunches through the pre-flight
from the run's submit folder and links the new run to the old one.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from guarded_sbatch.cli.array_lifecycle import (
    array_tasks, cancel_array, link_restarted, siblings, task_of, without_shared,
)

from guarded_sbatch.records.audit import AuditLog
from guarded_sbatch.core.config import load_config
from guarded_sbatch.core.errors import BlockedError, ExitCode, GuardedError, SchedulerError, UsageError
from guarded_sbatch.core.waiting import Waiting, fit, tell, terminal_width
from guarded_sbatch.records.registry import RunRecord, find_run, list_runs
from guarded_sbatch.scheduler.interface import JobState

YES_FLAGS = ("--yes", "-y")


@dataclass(frozen=True)
class LifecycleArgs:
    """What kill and restart were given."""

    run: str
    yes: bool
    guard_options: tuple[str, ...]  # restart only: passed on to the launch


def parse_lifecycle_args(argv: list[str], *, command: str, allow_guard_options: bool) -> LifecycleArgs:
    """RUN, --yes and (restart only) guard options; anything else is a usage error."""
    from guarded_sbatch.sbatch.guard_options import guard_option

    run: str | None = None
    yes = False
    guard: list[str] = []
    index = 0
    while index < len(argv):
        word = argv[index]
        name = word.partition("=")[0]
        if word in YES_FLAGS:
            yes = True
        elif word == "--json":
            raise UsageError(f"`guarded-sbatch {command}` has no --json output; `guarded-sbatch status --json` "
                             "shows the run's state afterwards")
        elif allow_guard_options and (row := guard_option(name)) is not None:
            guard.append(word)
            if row.takes_value and "=" not in word:
                if index + 1 >= len(argv):
                    raise UsageError(f"{name} needs a value, e.g. {name}=VALUE")
                index += 1
                guard.append(argv[index])
        elif word.startswith("-"):
            allowed = "--yes and --guard-* options" if allow_guard_options else "--yes"
            raise UsageError(f"unknown option {word} for `guarded-sbatch {command}`: it takes RUN and {allowed}")
        elif run is None:
            run = word
        else:
            raise UsageError(f"`guarded-sbatch {command}` takes one run, got {run!r} and {word!r}")
        index += 1
    if run is None:
        raise UsageError(f"name the run to {command}: `guarded-sbatch {command} RUN` (see `guarded-sbatch status`)")
    return LifecycleArgs(run, yes, tuple(guard))


def confirm(question: str, *, assume_yes: bool, stdin: TextIO | None = None, err: TextIO | None = None) -> None:
    """Ask for a typed "yes" on a terminal; without a terminal only --yes will do."""
    stdin = stdin or sys.stdin
    err = err or sys.stderr
    if assume_yes:
        return
    if stdin is None or stdin.closed or not stdin.isatty():
        raise UsageError("nothing deleted: no terminal to confirm on; rerun with --yes to go ahead without asking")
    err.write(fit(f"{question} Type yes to go ahead:", terminal_width(err)) + " ")
    err.flush()
    answer = stdin.readline().strip().lower()
    if answer != "yes":
        raise UsageError("nothing deleted: not confirmed (type yes, or rerun with --yes)")


def kill_command(argv: list[str]) -> int:
    """Stop the run, clean up in order, record who stopped it; exit 1 when it had already ended."""
    args = parse_lifecycle_args(argv, command="kill", allow_guard_options=False)
    tasks = array_tasks(args.run)
    if tasks:
        return _kill_array(args.run, tasks, yes=args.yes)
    record = find_run(args.run)
    was_live = _job_live(record)
    failed = _clean_up(record, yes=args.yes, verb="kill")
    record.ended = "killed"  # its jobs are stopped either way
    _note_stopped_by(record, was_live, "user (kill)")
    record.save()
    _audit("kill", record, reason="cleanup incomplete" if failed else "killed and cleaned up")
    if failed:
        raise UsageError(f"run {'killed' if was_live else 'stopped before'} but the cleanup is incomplete: "
                         f"{len(failed)} step(s) not done (see above), first: {failed[0]}")
    if not was_live:
        tell(f"guarded-sbatch: nothing stopped: run {record.run_name} (job {record.job_id}) had already ended "
             f"({_state_of(record)}); its files were cleaned up")
        return int(ExitCode.NOTHING_TO_STOP)
    tell(f"guarded-sbatch: run {record.run_name} (job {record.job_id}) killed and cleaned up")
    return int(ExitCode.OK)


def _state_of(record: RunRecord) -> str:
    from guarded_sbatch.scheduler import get_scheduler

    try:
        return get_scheduler(record.backend).state(record.job_id).value
    except GuardedError:
        return "no longer known to the scheduler"


def restart_command(argv: list[str], *, launch: Callable[..., int] | None = None) -> int:
    """The pre-flight of the relaunch first, then stop and clean up as kill does, then relaunch."""
    args = parse_lifecycle_args(argv, command="restart", allow_guard_options=True)
    tasks = array_tasks(args.run)
    record = tasks[0] if tasks else find_run(args.run)
    if record.ended == "restarted":
        newer = [r.run_id for r in list_runs() if r.restarted_from == record.run_id]
        hint = f"; restart the newer run {newer[-1]} instead" if newer else ""
        raise UsageError(f"run {record.run_id} was already restarted{hint}")
    if record.launched_by == "submitit":
        raise UsageError(f"run {record.run_id} was submitted from Python (GuardedExecutor): kill it here, then "
                         "submit the function again from Python")
    launch_argv = restart_launch_argv(record, args.guard_options, whole_array=bool(tasks))
    run_launch = launch or (_run_under_guard if record.launched_by == "run" else _run_launch)
    # The pre-flight runs first, so a blocked relaunch deletes nothing.
    tell("guarded-sbatch: pre-flight for the restart (nothing deleted yet):")
    # one prompt per flow: the plan below ends in the question, unless --yes answered it already
    clear = ("Clear: the restart goes ahead (stop the run, clean up, relaunch)." if args.yes else
             "Clear: the restart can go ahead (stop the run, clean up, relaunch) once you confirm below.")
    if _in_folder(record.submit_dir, lambda: run_launch(launch_argv, check_only=True, color=False,
                                                        clear_line=clear)) != 0:
        raise BlockedError("restart blocked by the pre-flight: nothing was stopped or deleted; fix the failed "
                           "checks above or waive one with --guard-waive CHECK=\"REASON\"")
    if tasks:
        failed = _clean_up_array(args.run, tasks, yes=args.yes, verb="restart")
    else:
        was_live = _job_live(record)
        failed = _clean_up(record, yes=args.yes, verb="restart")
        _note_stopped_by(record, was_live, "user (restart)")
    if failed:
        raise UsageError(f"run stopped but not relaunched: {len(failed)} cleanup step(s) not done (see above), "
                         f"first: {failed[0]}; fix that and run the restart again")
    before = {r.run_id for r in list_runs()}
    tell("guarded-sbatch: relaunching (the pre-flight above passed; it runs again, quietly):")
    code = _in_folder(record.submit_dir, lambda: run_launch(launch_argv, check_only=False, color=False,
                                                            show_report=False))
    new_runs = [r for r in list_runs() if r.run_id not in before]
    if tasks:
        link_restarted(tasks, new_runs)
    record.ended = "restarted"
    record.save()
    if code != 0 or not new_runs:
        raise SchedulerError(f"run {record.run_id} was cleaned up but the relaunch did not submit (exit {code}); "
                             f"launch it again with `guarded-sbatch {' '.join(launch_argv)}`")
    if tasks:
        tell(f"guarded-sbatch: job array {args.run} ({len(tasks)} tasks) restarted as job "
             f"{new_runs[0].job_id.partition('_')[0]}")
        return int(ExitCode.OK)
    new_record = new_runs[-1]
    new_record.restarted_from = record.run_id
    new_record.save()
    _audit("restart", record, reason=f"relaunched as job {new_record.job_id}", new_job=new_record.job_id,
           new_run=new_record.run_id)
    tell(f"guarded-sbatch: run {record.run_name} restarted as job {new_record.job_id} ({new_record.run_id})")
    return int(ExitCode.OK)


def restart_launch_argv(record: RunRecord, guard_options: tuple[str, ...], *, whole_array: bool = False) -> list[str]:
    """The launch words of a restart: the run's recorded guard settings, then the user's, then the original
    sbatch options, script and args. Later single-valued guard options win; a re-given waiver replaces the
    recorded one for that check. One task of an array is relaunched as an array of that task alone (`--array=T`,
    so it picks the same settings from SLURM_ARRAY_TASK_ID); `whole_array`: the array as it was launched."""
    from guarded_sbatch.sbatch.guard_options import replay_words

    if any("[redacted]" in word for word in [*record.sbatch_options, record.script, *record.script_args,
                                             *record.guard_words]):
        raise UsageError(f"run {record.run_id} was launched with a secret on its command line, which was not recorded: "
                         "relaunch it by hand, with the secret in an environment variable")
    recorded = replay_words(record.guard_words, guard_options, record)
    command = ["--", record.script] if record.launched_by == "run" else [record.script]  # `run [options] -- COMMAND`
    task = None if whole_array else task_of(record)
    one_task = [f"--array={task}"] if task is not None else []  # after the recorded options: the last --array wins
    return [*recorded, *guard_options, "--guard-restart", *record.sbatch_options, *one_task, *command,
            *record.script_args]


def _job_live(record: RunRecord) -> bool:
    from guarded_sbatch.scheduler import get_scheduler

    try:
        return not get_scheduler(record.backend).state(record.job_id).is_terminal
    except GuardedError:
        return False  # not known to the scheduler any more: nothing of it left to stop


def _note_stopped_by(record: RunRecord, was_live: bool, who: str) -> None:
    """Only a job that was still going and is now cancelled was stopped by this command; a kill of a run that
    had completed (or crashed) by itself leaves its end as it was."""
    from guarded_sbatch.scheduler import get_scheduler

    if not was_live or record.stopped_by:
        return
    try:
        if get_scheduler(record.backend).state(record.job_id) is JobState.CANCELLED:
            record.stopped_by = who
    except GuardedError:
        pass


def _run_under_guard(argv: list[str], *, check_only: bool, color: bool, show_report: bool = True,
                     clear_line: str = "") -> int:
    from guarded_sbatch.cli.run import run_under_guard  # a `guarded-sbatch run` run: its argv ends in -- COMMAND

    return run_under_guard(argv, check_only=check_only, color=color, clear_line=clear_line)


def _audit(event: str, record: RunRecord, **fields: str) -> None:
    try:
        problem = AuditLog.from_config(load_config()).record(event, job=record.job_id, run=record.run_id, **fields)
    except GuardedError as exc:
        problem = exc.message
    if problem:
        tell(f"guarded-sbatch: warning: the site's audit record was not written ({problem})")


def _run_launch(argv: list[str], *, check_only: bool, color: bool, show_report: bool = True,
                clear_line: str = "") -> int:
    from guarded_sbatch.cli.launch import run_launch

    return run_launch(argv, check_only=check_only, color=color, show_report=show_report, clear_line=clear_line)


def _in_folder(folder: str, action: Callable[[], int]) -> int:
    if not folder:
        return action()
    previous = os.getcwd()
    try:
        os.chdir(folder)
    except OSError as exc:
        raise UsageError(f"the run's submit folder {folder} is gone ({exc.strerror}): cannot relaunch from it") from None
    try:
        return action()
    finally:
        os.chdir(previous)


def _show_outcome(outcome: Any) -> None:
    mark = "done" if outcome.ok else "NOT DONE"
    tell(f"guarded-sbatch: [{outcome.step}] {mark}: {outcome.detail}")


def _clean_up(record: RunRecord, *, yes: bool, verb: str) -> list[str]:
    """Show the plan, confirm, stop the run and clean up; return the details of the steps not done."""
    from guarded_sbatch.actions.cleanup import execute_cleanup
    from guarded_sbatch.scheduler import get_scheduler

    config = load_config()
    planning, plan = _task_plan(record, config.run_roots, verb)
    confirm(f"Stop run {record.run_name} and delete the above?", assume_yes=yes)
    record = planning
    scheduler = get_scheduler(record.backend)

    if _job_live(record):
        tell(f"guarded-sbatch: stopping job {record.job_id} and its sidecar; waiting until both have ended "
              "(seconds usually, at most 90 s)")
    try:
        with Waiting(f"run {record.run_name}'s stop and cleanup", said=True) as told:
            told.detail = f"stopping job {record.job_id} (cancelled, then asked until it has ended)"

            def shown(outcome: Any) -> None:
                _show_outcome(outcome)
                told.detail = f"done so far: {outcome.step}"
            outcomes = execute_cleanup(plan, record, scheduler, on_outcome=shown)
    except GuardedError as exc:
        raise type(exc)(f"{verb} stopped before deleting anything: {exc.message}", exit_code=exc.exit_code) from None
    return [o.detail for o in outcomes if not o.ok]


def _task_plan(record: RunRecord, run_roots: Sequence[Path], verb: str, *,
               stop: bool = True) -> tuple[RunRecord, Any]:
    """A run's cleanup plan, shown; an array task's leaves what a sibling task names too (cli/array_lifecycle.py).
    `stop=False`: without the stop and scheduler steps (the array was cancelled as a whole)."""
    from guarded_sbatch.actions.cleanup import plan_cleanup

    files, kept = _own_source_files(record), list[str]()
    if task_of(record) is not None:
        others = siblings(record)
        theirs = [f for other in others for f in _own_source_files(other)]
        record, files, kept = without_shared(record, others, files, theirs)
    plan = plan_cleanup(record, run_roots, source_files=files)
    if not stop:
        plan = dataclasses.replace(plan, steps=tuple(s for s in plan.steps if s.name not in ("stop", "scheduler")))
    tell(f"guarded-sbatch: {verb} {plan.render()}")
    for path in kept:
        tell(f"guarded-sbatch: kept {path}: another task of the array names it too")
    for refusal in plan.refusals:
        tell(f"guarded-sbatch: path guard: {refusal.refused}")
    return record, plan


def _kill_array(array: str, tasks: list[RunRecord], *, yes: bool) -> int:
    """`kill J`: every task of the array cancelled at once, each cleaned up as a run of its own."""
    failed = _clean_up_array(array, tasks, yes=yes, verb="kill")
    for task in tasks:
        task.ended = "killed"
        task.save()
        _audit("kill", task, reason="cleanup incomplete" if failed else "killed and cleaned up (whole array)")
    if failed:
        raise UsageError(f"array {array} stopped but the cleanup is incomplete: {len(failed)} step(s) not done "
                         f"(see above), first: {failed[0]}")
    tell(f"guarded-sbatch: job array {array} ({len(tasks)} tasks) killed and cleaned up")
    return int(ExitCode.OK)


def _clean_up_array(array: str, tasks: list[RunRecord], *, yes: bool, verb: str) -> list[str]:
    """Show every task's plan, confirm once, cancel the array with one call, then clean up each task."""
    from guarded_sbatch.actions.cleanup import execute_cleanup
    from guarded_sbatch.scheduler import get_scheduler

    config = load_config()
    tell(f"guarded-sbatch: {verb} job array {array}: `scancel {array}` (all {len(tasks)} tasks), then each task's "
         "cleanup:")
    plans = [_task_plan(task, config.run_roots, verb, stop=False) for task in tasks]
    confirm(f"Stop all {len(tasks)} tasks of array {array} and delete the above?", assume_yes=yes)
    scheduler = get_scheduler(tasks[0].backend)
    try:
        before, after = cancel_array(scheduler, array, [t.job_id for t in tasks])
    except GuardedError as exc:
        raise type(exc)(f"{verb} stopped before deleting anything: {exc.message}", exit_code=exc.exit_code) from None
    failed: list[str] = []
    for task, (planning, plan) in zip(tasks, plans):
        if not before[task.job_id].is_terminal and after[task.job_id] is JobState.CANCELLED and not task.stopped_by:
            task.stopped_by = f"user ({verb})"
            task.save()
        outcomes = execute_cleanup(plan, planning, scheduler, on_outcome=_show_outcome)
        failed += [o.detail for o in outcomes if not o.ok]
    return failed


def _own_source_files(record: RunRecord) -> list[str]:
    """The files of the run's own sources that kill deletes, as each kind says (the W&B run folders of the id
    guarded-sbatch gave the job, also when its sidecar never saw them); never another run's or another user's."""
    from guarded_sbatch.sources.run_sources import run_specs
    from guarded_sbatch.sources.kinds import run_files

    return run_files(run_specs(record))
