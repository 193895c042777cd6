"""The no-Slurm backend: each job is a process group run by a detached supervisor.

A job's folder holds job.json (its state, written atomically by the supervisor) and a cancel
marker. States follow Slurm's names so the sidecar and status code never branch on the backend.
"""

from __future__ import annotations

import getpass
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from guarded_sbatch.errors import SchedulerError, UsageError
from guarded_sbatch.fsutil import read_json, state_dir, write_json_atomic
from guarded_sbatch.scheduler.base import JobInfo, JobState, SubmitRequest

# sbatch options the local backend honours; every other option is accepted and ignored.
_VALUE_OPTIONS = {
    "-J": "job-name", "--job-name": "job-name",
    "-o": "output", "--output": "output",
    "-e": "error", "--error": "error",
    "-D": "chdir", "--chdir": "chdir",
    "-t": "time", "--time": "time",
    "-d": "dependency", "--dependency": "dependency",
}
_FLAG_OPTIONS = {"--kill-on-invalid-dep": "kill-on-invalid-dep"}


@dataclass(frozen=True)
class LocalOptions:
    job_name: str
    output: str
    error: str | None
    chdir: str | None
    time_limit_s: int | None
    after_job: str | None
    kill_on_invalid_dep: bool


def parse_local_options(options: tuple[str, ...], script_text: str) -> LocalOptions:
    """Collect the honoured options: #SBATCH lines first, the command line overrides them."""
    found: dict[str, str] = {}
    for line in script_text.splitlines():
        if not line.startswith("#SBATCH"):
            if line.strip() and not line.startswith("#"):
                break  # sbatch stops reading #SBATCH lines at the first command
            continue
        try:
            words = shlex.split(line[len("#SBATCH"):], comments=True)
        except ValueError:
            continue
        found.update(_collect(words))
    found.update(_collect(list(options)))
    dependency = found.get("dependency", "")
    after_job = None
    if dependency:
        kind, _, job = dependency.partition(":")
        if kind != "after" or not job:
            raise UsageError(f"the local backend understands only --dependency=after:ID, not {dependency!r}")
        after_job = job.split(":")[0]
    kill_flag = found.get("kill-on-invalid-dep", "no").lower() in {"yes", "true", "1", ""}
    return LocalOptions(
        job_name=found.get("job-name", ""),
        output=found.get("output", "guarded-local-%j.out"),
        error=found.get("error"),
        chdir=found.get("chdir"),
        time_limit_s=parse_time_limit(found["time"]) if "time" in found else None,
        after_job=after_job,
        kill_on_invalid_dep=kill_flag if "kill-on-invalid-dep" in found else False,
    )


def _collect(words: list[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    i = 0
    while i < len(words):
        word = words[i]
        name, eq, value = word.partition("=")
        if name in _FLAG_OPTIONS:
            found[_FLAG_OPTIONS[name]] = value if eq else "yes"
        elif name in _VALUE_OPTIONS:
            if not eq:
                if i + 1 >= len(words):
                    raise UsageError(f"option {name} needs a value")
                i += 1
                value = words[i]
            found[_VALUE_OPTIONS[name]] = value
        elif len(word) > 2 and word[:2] in _VALUE_OPTIONS and not word.startswith("--"):
            found[_VALUE_OPTIONS[word[:2]]] = word[2:]  # -Jname, -o/path
        i += 1
    return found


def parse_time_limit(text: str) -> int | None:
    """Slurm's time formats: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S; UNLIMITED → None."""
    text = text.strip()
    if text.upper() in {"UNLIMITED", "INFINITE", "-1"}:
        return None
    days = 0
    if "-" in text:
        day_text, text = text.split("-", 1)
        days = int(day_text)
        parts = [int(p) for p in text.split(":")] + [0, 0]
        hours, minutes, seconds = parts[0], parts[1], parts[2]
    else:
        parts = [int(p) for p in text.split(":")]
        if len(parts) == 1:
            hours, minutes, seconds = 0, parts[0], 0
        elif len(parts) == 2:
            hours, minutes, seconds = 0, parts[0], parts[1]
        elif len(parts) == 3:
            hours, minutes, seconds = parts
        else:
            raise UsageError(f"cannot read time limit {text!r}: use minutes, HH:MM:SS or D-HH:MM:SS")
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def expand_output_pattern(pattern: str, job_id: str, job_name: str, user: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "%" and i + 1 < len(pattern):
            code = pattern[i + 1]
            out.append({"j": job_id, "A": job_id, "x": job_name, "u": user, "%": "%"}.get(code, "%" + code))
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


class LocalScheduler:
    """Jobs as local process groups, with Slurm's states."""

    name = "local"

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or state_dir() / "local-jobs"

    def job_dir(self, job_id: str) -> Path:
        if not job_id.isdigit():
            raise UsageError(f"{job_id!r} is not a local job id (expected digits)")
        return self.root / job_id

    def _next_id(self) -> str:
        import fcntl

        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / "counter", "a+", encoding="utf-8") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            handle.seek(0)
            current = int(handle.read().strip() or "0")
            handle.seek(0)
            handle.truncate()
            handle.write(str(current + 1))
        return str(current + 1)

    def submit(self, request: SubmitRequest) -> str:
        script = request.script
        try:
            text = script.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise UsageError(f"cannot read script {script}: {exc.strerror}; check the path") from None
        options = parse_local_options(request.sbatch_options, text)
        base = Path(request.workdir or os.getcwd())
        workdir = (base / options.chdir) if options.chdir else base
        if not workdir.is_dir():
            raise UsageError(f"working folder {workdir} does not exist; create it or fix --chdir")
        job_id = self._next_id()
        user = self.current_user()
        stdout_path = workdir / expand_output_pattern(options.output, job_id, options.job_name or script.name, user)
        stderr_path = (
            workdir / expand_output_pattern(options.error, job_id, options.job_name or script.name, user)
            if options.error else None
        )
        folder = self.job_dir(job_id)
        folder.mkdir(parents=True)
        spec = {
            "job_id": job_id,
            "name": options.job_name or script.name,
            "owner": user,
            "argv": ["bash", str(script.resolve()), *request.script_args],
            "work_dir": str(workdir.resolve()),
            "stdout_path": str(stdout_path),
            "stderr_path": str(stderr_path) if stderr_path else None,
            "time_limit_s": options.time_limit_s,
            "after_job": options.after_job,
            "kill_on_invalid_dep": options.kill_on_invalid_dep,
            "env": {**request.env, "GUARDED_SBATCH_JOB_ID": job_id},
            "submit_time": time.time(),
        }
        write_json_atomic(folder / "spec.json", spec)
        write_json_atomic(folder / "job.json", {"state": JobState.PENDING.value})
        log = open(folder / "supervisor.log", "ab")
        try:
            # Detached on purpose: the supervisor outlives the CLI that submitted the job.
            proc = subprocess.Popen(
                [sys.executable, "-m", "guarded_sbatch.scheduler.local_supervisor", str(folder)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                env={**os.environ, **request.env},
            )
        except OSError as exc:
            raise SchedulerError(f"cannot start the local job supervisor: {exc}") from None
        finally:
            log.close()
        write_json_atomic(folder / "supervisor.json", {"pid": proc.pid})
        return job_id

    def _status(self, job_id: str) -> tuple[dict, dict]:
        folder = self.job_dir(job_id)
        spec = read_json(folder / "spec.json")
        if spec is None:
            raise SchedulerError(f"no local job {job_id}; see `guarded-sbatch status` for your runs")
        status = read_json(folder / "job.json") or {"state": JobState.UNKNOWN.value}
        state = JobState(status.get("state", "UNKNOWN"))
        if not state.is_terminal and not self._supervisor_alive(folder):
            status = read_json(folder / "job.json") or status  # it may have finished just now
            if not JobState(status.get("state", "UNKNOWN")).is_terminal:
                status = {**status, "state": JobState.FAILED.value, "reason": "supervisor vanished"}
        return spec, status

    @staticmethod
    def _supervisor_alive(folder: Path) -> bool:
        info = read_json(folder / "supervisor.json")
        if not info:
            return True  # just submitted
        try:
            os.kill(int(info["pid"]), 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        try:
            with open(f"/proc/{int(info['pid'])}/stat", encoding="ascii") as handle:
                return handle.read().split(") ")[-1][:1] != "Z"
        except OSError:
            return False

    def state(self, job_id: str) -> JobState:
        return JobState(self._status(job_id)[1]["state"])

    def info(self, job_id: str) -> JobInfo:
        spec, status = self._status(job_id)
        return JobInfo(
            job_id=job_id,
            state=JobState(status["state"]),
            name=spec["name"],
            owner=spec["owner"],
            work_dir=spec["work_dir"],
            stdout_path=spec["stdout_path"],
            time_limit_s=spec["time_limit_s"],
            start_time=status.get("start_time"),
            end_time=status.get("end_time"),
            exit_code=status.get("exit_code"),
            reason=status.get("reason", ""),
        )

    def cancel(self, job_id: str, *, signal_name: str | None = None) -> None:
        folder = self.job_dir(job_id)
        spec, status = self._status(job_id)
        if JobState(status["state"]).is_terminal:
            return
        sig = getattr(signal, f"SIG{signal_name}", None) if signal_name else signal.SIGTERM
        if sig is None:
            raise UsageError(f"unknown signal {signal_name!r}")
        if signal_name is None:
            (folder / "cancel").write_text(str(time.time()), encoding="utf-8")
        pgid = status.get("pgid")
        if pgid:
            try:
                os.killpg(int(pgid), sig)
            except ProcessLookupError:
                pass

    def current_user(self) -> str:
        return getpass.getuser()

    def estimate_start(self, request: SubmitRequest) -> float | None:
        return time.time()

    def active_job_names(self) -> set[str]:
        names: set[str] = set()
        if not self.root.is_dir():
            return names
        for folder in self.root.iterdir():
            if folder.name.isdigit():
                try:
                    spec, status = self._status(folder.name)
                except SchedulerError:
                    continue
                if not JobState(status["state"]).is_terminal:
                    names.add(spec["name"])
        return names
