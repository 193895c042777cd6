"""Stop a run the way it was launched (or with the user's stop command) and check that it took."""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass

from guarded_sbatch.actions.stop_outcome import StopOutcome
from guarded_sbatch.core.config import SidecarJobSettings, load_config
from guarded_sbatch.core.errors import CommandError, GuardedError, SchedulerError
from guarded_sbatch.core.runner import run_command
from guarded_sbatch.scheduler.interface import JobState, Scheduler, SchedulerUnreachableError
from guarded_sbatch.actions.stop_targets import parse_stop_target, stop_with_command
from guarded_sbatch.actions.stop_targets import stop_target as stop_it

__all__ = ["StopOutcome", "stop_run"]  # StopOutcome lives in stop_outcome (stop_targets needs it too)


def stop_run(
    scheduler: Scheduler | None,
    job_id: str | None,
    stop_command: str | None = None,
    *,
    confirm_timeout_s: float = 60.0,
    poll_s: float = 2.0,
    unreachable_retry_s: float = 300.0,
    stop_target: str | None = None,
    grace_s: float = 30.0,
    kill_grace_s: float | None = None,
) -> StopOutcome:
    """Stop stop_target (tmux:, pid:, ssh:; actions/stop_targets.py) if given (after stop_command, if both
    are), else run stop_command if given, else cancel job_id; then wait until the job is gone.
    A scheduler that does not answer (slurmctld restarting) is asked again for up to
    unreachable_retry_s: a STOP must not be lost to a controller hiccup. A cancel first ends the job's steps:
    TERM, then KILL after kill_grace_s (default: the config's sidecar.kill_grace_seconds), whatever they do with
    TERM (a submitit job ignores it), and only then cancels the job, so its end time is its processes' end."""
    if stop_target:

        try:
            target = parse_stop_target(stop_target)
            if stop_command:

                return stop_with_command(stop_command, target, grace_s=grace_s, timeout_s=confirm_timeout_s)
            return stop_it(target, grace_s=grace_s)
        except GuardedError as exc:
            return StopOutcome("target", False, f"stop of {stop_target} failed: {exc}")
    if stop_command:
        try:
            run_command(shlex.split(stop_command), timeout=confirm_timeout_s)
        except (CommandError, ValueError) as exc:
            return StopOutcome("stop_command", False, f"stop command failed: {exc}")
        if scheduler is None or job_id is None:
            return StopOutcome("stop_command", True, f"ran `{stop_command}`")
        final = _wait_terminal(scheduler, job_id, confirm_timeout_s, poll_s)
        took = final is not None and final.is_terminal
        return StopOutcome("stop_command", took, f"ran `{stop_command}`; job {job_id} is {final.value if final else 'unknown'}",
                           final.value if final else None)
    if scheduler is None or job_id is None:
        return StopOutcome("none", True, "no job or stop command to act on: STOP reported, nothing killed")
    deadline = time.monotonic() + unreachable_retry_s
    kill_after = _kill_grace() if kill_grace_s is None else kill_grace_s
    while True:
        outcome = _cancel_once(scheduler, job_id, confirm_timeout_s, poll_s, kill_after)
        if outcome is not None or time.monotonic() > deadline:
            return outcome or StopOutcome(
                "cancel", False, f"cancel of job {job_id} failed: the scheduler did not answer for "
                f"{unreachable_retry_s:.0f} s; cancel it by hand (scancel {job_id})")
        time.sleep(poll_s)


def _cancel_once(scheduler: Scheduler, job_id: str, confirm_timeout_s: float, poll_s: float,
                 kill_grace_s: float) -> StopOutcome | None:
    """One attempt; None when the scheduler could not be reached (worth another try)."""

    try:
        info = scheduler.info(job_id)
        me = scheduler.current_user()
        if info.owner and info.owner != me:
            return StopOutcome("cancel", False, f"job {job_id} belongs to {info.owner}, not {me}: not cancelled")
        if info.state.is_terminal:
            return StopOutcome("cancel", True, f"job {job_id} had already ended ({info.state.value})", info.state.value)
        steps = end_steps(scheduler, job_id, kill_grace_s)
        cancelled_at = time.time()
        scheduler.cancel(job_id)
    except SchedulerUnreachableError:
        return None
    except GuardedError as exc:
        return StopOutcome("cancel", False, f"cancel of job {job_id} failed: {exc}")
    final = _wait_terminal(scheduler, job_id, confirm_timeout_s, poll_s)
    if final is not None and final.is_terminal:
        if not steps.said and scheduler.traits.process_groups_here:
            steps = _group_end(scheduler, job_id, cancelled_at)
        return StopOutcome("cancel", True, f"job {job_id} cancelled, now {final.value}{steps.said}", final.value,
                           ended_at=steps.ended_at)
    if final is JobState.UNKNOWN:
        return None  # cancelled, but nobody could confirm it: ask again (a second scancel is harmless)
    return StopOutcome("cancel", False, f"job {job_id} still {final.value if final else 'unknown'} after cancel")


def _wait_terminal(scheduler: Scheduler, job_id: str, timeout_s: float, poll_s: float) -> JobState | None:
    deadline = time.monotonic() + timeout_s
    state: JobState | None = None
    while True:
        try:
            state = scheduler.state(job_id)
        except SchedulerError:
            state = JobState.UNKNOWN
        if state.is_terminal or time.monotonic() > deadline:
            return state
        time.sleep(poll_s)


@dataclass(frozen=True)
class StepsEnd:
    said: str = ""  # "; its steps ... ended at ..." for the outcome's detail ("" for a job without steps)
    ended_at: float | None = None  # epoch seconds when its steps were seen gone


def end_steps(scheduler: Scheduler, job_id: str, kill_grace_s: float, *, poll_s: float = 0.25,
              kill_wait_s: float = 10.0) -> StepsEnd:
    """TERM to each live step of the job (a trainer's chance to leave by itself), KILL to those left after
    kill_grace_s; wait until they are gone. The batch shell is paused first (STOP) and left to the job's cancel
    that follows (Slurm's cancel sends CONT, then TERM): else it would end the job as FAILED the moment its
    steps end, before the cancel."""
    steps = scheduler.live_steps(job_id)
    if not steps:
        return StepsEnd()
    started = time.time()
    scheduler.cancel(job_id, signal_name="B:STOP")
    for step in steps:
        scheduler.cancel(step, signal_name="TERM")
    left = _steps_after(scheduler, job_id, time.monotonic() + kill_grace_s, poll_s)
    how = "TERM"
    if left:
        how = f"TERM, then KILL after {kill_grace_s:g} s"
        for step in left:
            scheduler.cancel(step, signal_name="KILL")
        left = _steps_after(scheduler, job_id, time.monotonic() + kill_wait_s, poll_s)
    ended = time.time()
    if left:
        return StepsEnd(f"; its steps {', '.join(left)} still ran {ended - started:.1f} s after {how}")
    return StepsEnd(f"; its processes ended at {time.strftime('%H:%M:%S', time.localtime(ended))}, "
                    f"{ended - started:.1f} s after the stop ({how} to {', '.join(steps)})", ended)


def _group_end(scheduler: Scheduler, job_id: str, cancelled_at: float) -> StepsEnd:
    """A job run as a process group here (the local backend): when its processes ended, as the backend measured it
    (its supervisor's record of the end), after the cancel's TERM to the group."""
    try:
        ended = scheduler.info(job_id).end_time
    except GuardedError:
        return StepsEnd()
    if ended is None:
        return StepsEnd()
    return StepsEnd(f"; its processes ended at {time.strftime('%H:%M:%S', time.localtime(ended))}, "
                    f"{max(0.0, ended - cancelled_at):.1f} s after the stop (TERM to its process group)", ended)


def _steps_after(scheduler: Scheduler, job_id: str, deadline: float, poll_s: float) -> list[str]:
    """The job's steps still live at the deadline, or [] as soon as none is."""
    while True:
        try:
            left = scheduler.live_steps(job_id)
        except SchedulerUnreachableError:
            left = ["(unknown)"]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(poll_s)


def _kill_grace() -> float:
    """The site's grace between a stop's TERM and KILL; a config that cannot be read never holds up a stop."""
    try:
        return load_config().sidecar.kill_grace_s
    except GuardedError:
        return SidecarJobSettings.kill_grace_s
