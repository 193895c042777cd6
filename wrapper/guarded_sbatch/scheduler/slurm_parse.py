"""Parsers for the text Slurm's commands print. Slurm output is data: nothing here trusts its shape."""

from __future__ import annotations

import re
from datetime import datetime

from guarded_sbatch.core.errors import UsageError
from guarded_sbatch.sbatch.options import parse_time_limit as sbatch_time_limit
from guarded_sbatch.scheduler.interface import JobInfo, JobState

# `scontrol -o show job` prints `Key=value` pairs separated by single spaces, but values may themselves hold
# spaces (JobName, StdOut, Comment). A new pair starts at a space followed by a CamelCase key and `=`;
# keys may contain `:` and `/` (AllocNode:Sid, CPUs/Task, ReqB:S:C:T).
_KEY_START = re.compile(r"(?:^|(?<=\s))([A-Z][A-Za-z0-9_:/]*)=")

# sbatch --test-only (stderr): "sbatch: Job 4 to start at 1796211990 using 1 processors on nodes ..."
_TEST_ONLY = re.compile(r"\bJob\s+(\d+)\s+to start at\s+(\S+)")

# Messages meaning "the controller did not answer" rather than "the request was wrong".
_UNREACHABLE_MARKERS = (
    "unable to contact slurm controller",
    "socket timed out",
    "connection refused",
    "zero bytes were transmitted",
    "slurm backup controller in standby",
    "communication connection failure",
)

_INVALID_JOB_MARKERS = ("invalid job id", "job/step already completing or completed")


_STATE_ALIASES = {
    "CONFIGURING": JobState.PENDING,
    "REQUEUE_HOLD": JobState.REQUEUED,
    "REQUEUE_FED": JobState.REQUEUED,
    "REQUEUED": JobState.REQUEUED,
    "RESIZING": JobState.RUNNING,
    "SIGNALING": JobState.RUNNING,
    "STAGE_OUT": JobState.COMPLETING,
    "STOPPED": JobState.SUSPENDED,
    "BOOT_FAIL": JobState.NODE_FAIL,
    "DEADLINE": JobState.TIMEOUT,
    "REVOKED": JobState.CANCELLED,
    "SPECIAL_EXIT": JobState.FAILED,
}


def slurm_state(text: str) -> JobState:
    """A job's state from Slurm's name for it (squeue/scontrol/sacct; 'CANCELLED by 0' included)."""
    word = text.strip().split()[0].rstrip("+").upper() if text.strip() else ""
    if word in _STATE_ALIASES:
        return _STATE_ALIASES[word]
    try:
        return JobState(word)
    except ValueError:
        return JobState.UNKNOWN


def parse_key_values(line: str) -> dict[str, str]:
    """Split one `scontrol -o show ...` line into its fields (values keep their inner spaces)."""
    starts = list(_KEY_START.finditer(line))
    fields: dict[str, str] = {}
    for index, match in enumerate(starts):
        end = starts[index + 1].start() if index + 1 < len(starts) else len(line)
        key = match.group(1)
        if key not in fields:  # the first occurrence is Slurm's; later ones are inside a value
            fields[key] = line[match.end() : end].rstrip()
    return fields


def parse_time_limit(text: str) -> int | None:
    """A time limit as Slurm prints it, to seconds; None if unlimited or unknown. The grammar is
    sbatch's --time grammar (launch/sbatch_options.py); Slurm's output adds a few words for "none"."""
    value = text.strip()
    if not value or value.upper() in {"PARTITION_LIMIT", "N/A", "NONE"}:
        return None
    try:
        return sbatch_time_limit(value)
    except UsageError:
        return None


def parse_timestamp(text: str) -> float | None:
    """A Slurm time (epoch seconds under SLURM_TIME_FORMAT=%s, or ISO local time) to epoch seconds."""
    value = text.strip()
    if not value or value in {"Unknown", "None", "N/A", "0"}:
        return None
    if value.isdigit():
        return float(value)
    try:
        return datetime.fromisoformat(value).timestamp()  # naive: the login node's local time, as Slurm prints
    except ValueError:
        return None


def parse_exit_code(text: str) -> int | None:
    """`exit:signal` (e.g. `0:0`, `1:0`, `0:15`) to the exit status; a signal gives -signal, as Python's
    returncode does (and the local backend records), so `status` can write it back as sacct does."""
    status, _, signal = text.strip().partition(":")
    if not status.isdigit():
        return None
    if signal.isdigit() and int(signal) and not int(status):
        return -int(signal)
    return int(status)


def parse_user_name(user_id_field: str) -> str:
    """`UserId=alice(1000)` value to `alice`."""
    return user_id_field.split("(", 1)[0].strip()


def parse_parsable_job_id(stdout: str) -> str | None:
    """`sbatch --parsable` output (`123` or `123;cluster`) to the job id."""
    for line in reversed(stdout.splitlines()):
        candidate = line.strip().split(";", 1)[0]
        if re.fullmatch(r"\d+(_\d+)?", candidate):
            return candidate
    return None


def parse_test_only_start(stderr: str) -> float | None:
    """Start time from `sbatch --test-only` stderr."""
    match = _TEST_ONLY.search(stderr)
    return parse_timestamp(match.group(2)) if match else None


def is_unreachable(message: str) -> bool:
    lowered = message.lower()
    return any(marker in lowered for marker in _UNREACHABLE_MARKERS)


# an array task purged after MinJobAge while its array is still known: `scontrol show job J_T` says so on stdout
_TASK_NOT_FOUND = re.compile(r"\bJob \d+_\d+ not found")


def is_unknown_job(message: str) -> bool:
    lowered = message.lower()
    return any(marker in lowered for marker in _INVALID_JOB_MARKERS) or bool(_TASK_NOT_FOUND.search(message))


def error_lines(stderr: str, program: str) -> str:
    """The lines a Slurm command printed about what went wrong, joined into one line."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    chosen = [line for line in lines if "error" in line.lower()] or lines[:1]
    unique: list[str] = []
    for line in chosen:
        if line not in unique:
            unique.append(line)
    return "; ".join(unique) or f"{program} printed no message"


def held_times(state: JobState, start: float | None, end: float | None) -> tuple[float | None, float | None]:
    """The start and end a job has had, from Slurm's StartTime/EndTime: a pending job's StartTime is the
    scheduler's guess, a live job's EndTime is its start plus its TimeLimit (the planned end). Only a job that
    has run has a start, only one that has ended an end."""
    started = state.is_terminal or state.is_active
    return (start if started else None), (end if state.is_terminal or state is JobState.COMPLETING else None)


def job_info_from_scontrol(fields: dict[str, str]) -> JobInfo:
    """A job from the fields of one `scontrol -o show job` line."""
    reason = fields.get("Reason", "")
    state = slurm_state(fields.get("JobState", ""))
    start, end = held_times(state, parse_timestamp(fields.get("StartTime", "")),
                            parse_timestamp(fields.get("EndTime", "")))
    return JobInfo(
        job_id=fields.get("JobId", ""),
        state=state,
        name=fields.get("JobName", ""),
        owner=parse_user_name(fields.get("UserId", "")),
        work_dir=fields.get("WorkDir", ""),
        stdout_path=fields.get("StdOut", ""),
        time_limit_s=parse_time_limit(fields.get("TimeLimit", "")),
        start_time=start,
        end_time=end,
        exit_code=parse_exit_code(fields.get("ExitCode", "")),
        reason="" if reason in ("None", "(null)") else reason,
    )


def job_info_from_sacct(row: dict[str, str]) -> JobInfo:
    """A job from one `sacct -P` row (the fields of _SACCT_FIELDS in the Slurm backend)."""
    state = slurm_state(row["State"])
    start, end = held_times(state, parse_timestamp(row["Start"]), parse_timestamp(row["End"]))
    return JobInfo(
        job_id=row["JobID"],
        state=state,
        name=row["JobName"],
        owner=row["User"],
        work_dir=row["WorkDir"],
        time_limit_s=parse_time_limit(row["Timelimit"]),
        start_time=start,
        end_time=end,
        exit_code=parse_exit_code(row["ExitCode"]),
    )


def sacct_job_row(text: str, job_id: str, fields: tuple[str, ...]) -> dict[str, str] | None:
    """The job's own line of `sacct -n -P -o <fields>` output (JobID first), never a step's (`.batch`, `.extern`,
    `.0`): its ExitCode is the job's. One exception: a cancelled job has 0:0 on its own line (Slurm 22.05) and how
    it ended only on its `.batch` line, which is then taken: 0:15 for a batch shell killed by the cancel, 15:0 when
    the guard's stop had ended its steps first (the shell then left with their status), never a clean 0:0."""
    lines = (line.split("|") for line in text.splitlines())
    rows = {values[0]: dict(zip(fields, values)) for values in lines if len(values) == len(fields)}
    row = rows.get(job_id)
    batch = rows.get(f"{job_id}.batch")
    if row is not None and batch is not None and row["ExitCode"] == "0:0" and parse_exit_code(batch["ExitCode"]):
        row["ExitCode"] = batch["ExitCode"]
    return row


_PENDING_TASKS = re.compile(r"(\d+)_\[([^\]]*)\]")


def task_parts(job_id: str) -> tuple[str, int] | None:
    """(array job, task) of an array task id `J_T`; None for any other id."""
    job, sep, task = job_id.partition("_")
    return (job, int(task)) if sep and job.isdigit() and task.isdigit() else None


def _task_ranges(text: str) -> set[int]:
    """`0,2-5:2%4` (sbatch's grammar, as sacct prints an array's pending tasks) to the task ids."""
    tasks: set[int] = set()
    for part in text.partition("%")[0].split(","):
        first, _, rest = part.partition("-")
        last, _, step = rest.partition(":")
        if first.isdigit() and (not last or last.isdigit()) and (not step or step.isdigit()):
            tasks.update(range(int(first), int(last or first) + 1, int(step or 1)))
    return tasks


def sacct_states(text: str, wanted: list[str]) -> dict[str, JobState]:
    """The states of `wanted` from `sacct -n -P -X -o JobID,State` lines (asked by array id for tasks). sacct lists an
    array's tasks that ran one per line (`J_T`) and the ones still pending as one range (`J_[2-5%2]`); a task that
    is neither, in an array sacct knows, was cancelled before it started (Slurm keeps no line for it)."""
    states = {job: JobState.UNKNOWN for job in wanted}
    pending: dict[str, set[int]] = {}
    arrays: set[str] = set()
    for line in text.splitlines():
        job, _, state_text = line.strip().partition("|")
        ranges = _PENDING_TASKS.fullmatch(job)
        if ranges:
            pending.setdefault(ranges.group(1), set()).update(_task_ranges(ranges.group(2)))
            arrays.add(ranges.group(1))
            continue
        parts = task_parts(job)
        if parts is not None:
            arrays.add(parts[0])
        if job in states:
            states[job] = slurm_state(state_text)
    for job, state in states.items():
        parts = task_parts(job)
        if state is JobState.UNKNOWN and parts is not None and parts[0] in arrays:
            states[job] = JobState.PENDING if parts[1] in pending.get(parts[0], set()) else JobState.CANCELLED
    return states
