"""Check 5: when the run will end, in local time — epochs × seconds per epoch plus the queue wait."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from pathlib import Path

from guarded_sbatch.core.errors import GuardedError
from guarded_sbatch.core.fsutil import read_text_bounded
from guarded_sbatch.launch.checks.eta_pace import (budget_key, last_step_of, seconds_per_step_from_events,
                                                   seconds_per_step_from_stamps)
from guarded_sbatch.launch.context import PreflightContext
from guarded_sbatch.launch.results import CheckName, CheckResult, CheckStatus
from guarded_sbatch.launch.runconfig import as_number
from guarded_sbatch.sbatch.options import format_duration
from guarded_sbatch.scheduler.interface import SubmitRequest

NAME = CheckName.ETA.value
EPOCH_KEYS = ("num_train_epochs", "epochs", "num_epochs", "max_epochs", "n_epochs", "train_epochs")
STEP_KEYS = ("max_steps", "total_steps", "train_steps", "num_train_steps", "train_iters", "max_iters", "steps")
MAX_PLAUSIBLE_WAIT_S = 365 * 24 * 3600.0
LOG_SUFFIXES = (".log", ".out", ".txt", ".err")
EXPLICIT = re.compile(
    r"(?:epoch[ _]time|time[ _]per[ _]epoch|seconds[ _]per[ _]epoch|epoch[ "
    r"_]duration|sec/epoch)\D{0,5}(\d+(?:\.\d+)?)\s*(s|sec|seconds|min|m)?\b",
    re.IGNORECASE,
)
STAMPED = re.compile(r"(\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}).*?\bepoch\b\D{0,3}(\d+)", re.IGNORECASE)
MAX_LOG_BYTES = 20 * 1024 * 1024
# time per step, most explicit first: `time/step: 0.12s`, `sec/step 0.3`, HF's final
# `'train_steps_per_second': 4.2`, timestamps of step lines, tqdm's `12.3it/s` / `1.5s/it`
STEP_EXPLICIT = re.compile(
    r"(?:time[ _/]per[ _]step|sec(?:onds)?[ _/]per[ _]step|s/step|sec/step|step[ _]time|time/step)"
    r"\W{0,5}(\d+(?:\.\d+)?(?:e-?\d+)?)\s*(ms|s|sec)?\b", re.IGNORECASE)
STEPS_PER_SECOND = re.compile(r"['\"]?train_steps_per_second['\"]?\s*[:=]\s*['\"]?(\d+(?:\.\d+)?(?:e-?\d+)?)")
TQDM_RATE = re.compile(r"\b(\d+(?:\.\d+)?)\s*(it/s|s/it)\b")


def local_clock(moment: datetime, now: datetime) -> str:
    """`14:32 CET`, with the day when it is not today: `Tue 03 Mar 14:32 CET`."""
    local = moment.astimezone()
    if local.date() == now.astimezone().date():
        return local.strftime("%H:%M %Z")
    return local.strftime("%a %d %b %H:%M %Z")


def seconds_per_epoch_from_logs(folder: Path) -> tuple[float, str] | None:
    """From a reference run's text logs: explicit epoch times, else timestamps of epoch lines."""
    try:
        logs = sorted(
            p for p in folder.rglob("*") if p.suffix in LOG_SUFFIXES and p.is_file() and len(p.relative_to(folder).parts) <= 3
        )
    except OSError:
        return None
    return seconds_per_epoch_from_log_files(logs[:50])


def seconds_per_epoch_from_log_files(logs: list[Path]) -> tuple[float, str] | None:
    """From text logs: explicit epoch times, else timestamps of epoch lines."""
    for log in logs:
        try:
            text = read_text_bounded(log, MAX_LOG_BYTES, errors="replace")  # a FIFO or a device: skipped
        except OSError:
            continue
        explicit = []
        for match in EXPLICIT.finditer(text):
            value = float(match.group(1)) * (60.0 if (match.group(2) or "").lower() in ("min", "m") else 1.0)
            explicit.append(value)
        if explicit:
            return _median(explicit), f"median of {len(explicit)} epoch time(s) in {log}"
        first: tuple[datetime, int] | None = None
        last: tuple[datetime, int] | None = None
        for match in STAMPED.finditer(text):
            try:
                stamp = datetime.fromisoformat(match.group(1).replace("T", " "))
            except ValueError:
                continue
            epoch = int(match.group(2))
            if first is None:
                first = (stamp, epoch)
            last = (stamp, epoch)
        if first and last and last[1] > first[1] and last[0] > first[0]:
            seconds = (last[0] - first[0]).total_seconds() / (last[1] - first[1])
            return seconds, f"epoch {first[1]}→{last[1]} timestamps in {log}"
    return None


def seconds_per_step_from_log_files(logs: list[Path]) -> tuple[float, str] | None:
    """From a reference run's text logs: the time one training step took."""
    for log in logs:
        try:
            text = read_text_bounded(log, MAX_LOG_BYTES, errors="replace").replace("\r", "\n")
        except OSError:
            continue
        explicit = [float(m.group(1)) / (1000.0 if (m.group(2) or "").lower() == "ms" else 1.0)
                    for m in STEP_EXPLICIT.finditer(text)]
        if explicit:
            return _median(explicit), f"median of {len(explicit)} step time(s) in {log}"
        rates = [float(m.group(1)) for m in STEPS_PER_SECOND.finditer(text) if float(m.group(1)) > 0]
        if rates:
            return 1.0 / rates[-1], f"train_steps_per_second={rates[-1]:g} in {log}"
        stamped = seconds_per_step_from_stamps(text)
        if stamped is not None:
            return stamped[0], f"step {stamped[1]}→{stamped[2]} timestamps in {log}"
        bars = [float(v) if unit == "s/it" else 1.0 / float(v) for v, unit in TQDM_RATE.findall(text) if float(v) > 0]
        if len(bars) >= 3:
            return _median(bars), f"median of {len(bars)} progress-bar rates in {log}"
    return None


def check_eta(context: PreflightContext) -> CheckResult:
    """Check 5: when the run will end (epochs or steps × the reference's speed, plus the queue wait)."""
    evidence: list[str] = []
    warnings: list[str] = []
    epochs, epochs_from = _epochs(context)
    seconds_per_epoch, speed_from = _speed(context)
    unit = "epoch"
    if epochs is None or seconds_per_epoch is None:
        by_steps = _by_steps(context)  # a step-based run (max_steps) and a reference whose log times its steps
        if by_steps is not None:  # the same sum, counted in steps
            (epochs, epochs_from, seconds_per_epoch, speed_from), unit = by_steps, "step"
    if epochs is None or seconds_per_epoch is None:
        return _not_estimated(context, epochs, seconds_per_epoch)
    run_seconds = epochs * seconds_per_epoch
    evidence.append(
        f"{epochs:g} {unit}s ({epochs_from}) × {seconds_per_epoch:g} s per {unit} ({speed_from}) = "
        f"{format_duration(run_seconds)}"
    )
    now = context.now
    start = _expected_start(context, evidence, warnings)
    end = start + timedelta(seconds=run_seconds)
    eta_text = local_clock(end, now)
    details: dict[str, object] = {"eta_epoch_s": end.timestamp(), "run_seconds": run_seconds, "start_epoch_s": start.timestamp()}
    limit = context.options.time_limit_s
    if limit is not None:
        evidence.append(f"time limit {format_duration(limit)} ({context.options.source('time')})")
        if run_seconds > limit:
            return CheckResult(NAME, CheckStatus.FAILED,
                               f"the run needs {format_duration(run_seconds)} but the time limit is {format_duration(limit)}: "
                               "raise --time, lower the epochs, or plan a restart from checkpoints",
                               tuple(evidence), details)
    elif context.options.has("time"):
        evidence.append("time limit UNLIMITED")
    else:
        warnings.append("no --time: the partition's default limit applies")
    quiet = context.config.in_quiet_hours(end)
    if quiet is not None:
        warnings.append(f"it ends inside your quiet hours ({quiet.text})")
    finding = f"ends about {eta_text} (runs {format_duration(run_seconds)})"
    if warnings:
        return CheckResult(NAME, CheckStatus.WARNED, f"{finding}; {'; '.join(warnings)}", tuple(evidence), details)
    return CheckResult(NAME, CheckStatus.PASSED, finding, tuple(evidence), details)


def _not_estimated(context: PreflightContext, epochs: float | None, seconds_per_epoch: float | None) -> CheckResult:
    """The WARNED result of a run whose length cannot be estimated, naming what to give."""
    missing = [
        m
        for m, v in (
            ("the number of epochs (--guard-epochs)", epochs),
            ("seconds per epoch (--guard-seconds-per-epoch)", seconds_per_epoch),
        )
        if v is None
    ]
    logs = (list(context.reference.logs) or _logs_under(context.reference.folder)) if context.reference else []
    paced = seconds_per_step_from_log_files(logs) if seconds_per_epoch is None and logs else None
    if seconds_per_epoch is not None:
        why = ""
    elif paced is not None:
        why = (f" (the reference ran {paced[0]:.3g} s per step ({paced[1]}), but this run's number of steps is "
               "unknown: no step budget in its config)")
    elif context.reference is None or not logs:
        # a reference found among configs/ has no log to time: only a run that went through guarded-sbatch has one
        why = " (no earlier run of this config has a log that times it)"
    else:
        events = ", nor do its TensorBoard events" if context.reference.tb_dirs else ""
        why = f" (the reference run's log shows no epoch or step time: {logs[0]}{events})"
    return CheckResult(
        NAME, CheckStatus.WARNED, f"not checked: cannot estimate the run time{why}; give {' and '.join(missing)}, "
        f"or read the ETA from the run's own pace once it runs (`guarded-sbatch status`; a step budget is read from "
        f"any of {', '.join(STEP_KEYS)})"
    )


def _expected_start(context: PreflightContext, evidence: list[str], warnings: list[str]) -> datetime:
    """When the job would start: the scheduler's estimate, else now (the queue wait counted as zero, with a
    warning saying why)."""
    now = context.now
    if context.scheduler is None:
        warnings.append("no scheduler: queue wait unknown, counted as zero")
        return now
    try:
        estimate = context.scheduler.estimate_start(_request(context))
    except GuardedError as exc:
        warnings.append(f"queue wait unknown ({exc})")
        return now
    if estimate is None:
        warnings.append("the scheduler gave no start estimate: queue wait counted as zero")
        return now
    if estimate - now.timestamp() > MAX_PLAUSIBLE_WAIT_S:
        # a held job (--hold) or a partition that is down: Slurm answers with a date far in the future
        warnings.append(
            "the scheduler cannot say when the job would start (held, or no usable node): queue wait counted as zero"
        )
        return now
    start = max(now, datetime.fromtimestamp(estimate).astimezone())
    evidence.append(
        f"expected start {local_clock(start, now)} ({context.scheduler.name} estimate, wait "
        f"{format_duration((start - now).total_seconds())})"
    )
    return start


def _epochs(context: PreflightContext) -> tuple[float | None, str]:
    if context.launch.guard_options.epochs is not None:
        return float(context.launch.guard_options.epochs), "--guard-epochs"
    if context.intended is not None:
        # a step budget (`--steps 4000`, max_steps) wins over the epochs key: trainers stop at whichever is set
        steps, per_epoch = context.intended.find(STEP_KEYS), context.intended.find(("steps_per_epoch",))
        total, size = (as_number(steps[1]) if steps else None), (as_number(per_epoch[1]) if per_epoch else None)
        if total and size and total > 0 and size > 0:
            return total / size, f"{steps[0]}={total:g} / steps_per_epoch={size:g}"  # type: ignore[index]
        found = context.intended.find(EPOCH_KEYS)
        if found is not None:
            number = as_number(found[1])
            if number and number > 0:
                return number, f"config key {found[0]}"
    return None, ""


def _by_steps(context: PreflightContext) -> tuple[float, str, float, str] | None:
    """(steps, where from, seconds per step, where from) for a run whose budget is in steps."""
    if context.intended is None or context.reference is None:
        return None
    found = context.intended.find(STEP_KEYS)
    total = as_number(found[1]) if found else None
    budget = f"config key {found[0]}={total:g}" if found and total else ""
    logs = list(context.reference.logs) or _logs_under(context.reference.folder)
    if not total:  # the key whose value the reference ran to, learned from its log's last step
        total, budget = _learned_budget(context, logs)
    if not total:  # an epoch budget with its steps per epoch: the same steps, timed by the reference's step lines
        epochs, size = context.intended.find(EPOCH_KEYS), context.intended.find(("steps_per_epoch",))
        count, per = (as_number(epochs[1]) if epochs else None), (as_number(size[1]) if size else None)
        total = count * per if count and per else None
        budget = f"{epochs[0]}={count:g}, steps_per_epoch={per:g}" if total else ""  # type: ignore[index]
    if not total or total <= 0:
        return None
    speed = seconds_per_step_from_log_files(logs)
    if speed is None:  # the reference timed its epochs and says how many steps one has
        per_epoch = seconds_per_epoch_from_log_files(logs)
        size = context.reference.config.find(("steps_per_epoch",))
        steps = as_number(size[1]) if size else None
        if per_epoch is not None and steps and steps > 0:
            speed = (per_epoch[0] / steps, f"{per_epoch[1]}, / steps_per_epoch={steps:g} of the reference")
    if speed is None:  # no log paces it: the wall times of its TensorBoard events do
        events = seconds_per_step_from_events(context.reference.tb_dirs)
        return (total, budget, events[0], f"reference {events[1]}") if events is not None else None
    return total, budget, speed[0], f"reference logs: {speed[1]}"


def _learned_budget(context: PreflightContext, logs: list[Path]) -> tuple[float | None, str]:
    """(steps, where from) when one key of the reference's config holds the step its log ended at, and this run's
    config sets that key too."""
    assert context.reference is not None and context.intended is not None
    for log in logs:
        try:
            last = last_step_of(read_text_bounded(log, MAX_LOG_BYTES, errors="replace").replace("\r", "\n"))
        except OSError:
            continue
        key = budget_key(context.reference.config.values, last) if last is not None else None
        total = as_number(context.intended.values.get(key)) if key is not None else None
        if key is not None and total:
            return total, (f"config key {key}={total:g}: the reference's log ends at step {last} with "
                           f"{key}={context.reference.config.values[key]}")
    return None, ""


def _logs_under(folder: Path) -> list[Path]:
    try:
        return sorted(p for p in folder.rglob("*") if p.suffix in LOG_SUFFIXES and p.is_file()
                      and len(p.relative_to(folder).parts) <= 3)[:50]
    except OSError:
        return []


def _speed(context: PreflightContext) -> tuple[float | None, str]:
    if context.launch.guard_options.seconds_per_epoch is not None:
        return context.launch.guard_options.seconds_per_epoch, "--guard-seconds-per-epoch"
    if context.reference is not None:
        found = (
            seconds_per_epoch_from_log_files(list(context.reference.logs))
            if context.reference.logs
            else seconds_per_epoch_from_logs(context.reference.folder)
        )
        if found is not None:
            return found[0], f"reference logs: {found[1]}"
    return None, ""


def _request(context: PreflightContext) -> SubmitRequest:
    script = context.launch.script or Path("--wrap")
    return SubmitRequest(
        script=script,
        sbatch_options=context.launch.sbatch_options,
        script_args=context.launch.script_args,
        workdir=context.submit_dir,
    )


def _median(values: list[float]) -> float:
    """statistics.median, without importing statistics (and fractions, decimal) on every launch."""
    ordered, middle = sorted(values), len(values) // 2
    return ordered[middle] if len(values) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
