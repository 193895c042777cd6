"""GuardedExecutor: submitit's AutoExecutor whose jobs go through guarded-sbatch's own launch path.

    executor = GuardedExecutor(folder="logs/%j", run_name="cifar10-resnet18-bs128-lr0.1", tb_dir="runs/cifar",
                               config="configs/cifar10-resnet18.yaml")
    executor.update_parameters(timeout_min=60, slurm_partition="gpu")
    job = executor.submit(train, config)      # a submitit Job, as usual

Each submission is the batch script submitit writes (`python -m submitit.core._submit FOLDER` under its #SBATCH
lines), handed over at submitit's own hook (`GuardedSlurmExecutor`, a subclass of its SlurmExecutor, overrides
`_submit_command`) to the one launch pipeline of every front end (launch/pipeline.py): the whole pre-flight, as
`guarded-sbatch check` runs it, then the submission with its sidecar, its sources, judge settings and waivers
recorded and audited as the CLI's are. A failed check blocks with BlockedError unless waived
(`waivers={"config-diff": "why"}`; its hints name these keywords, not the CLI's flags); a sidecar that cannot be
submitted cancels the training job.

- The backend, as the CLI chooses it: `cluster=`, else GUARDED_SBATCH_BACKEND, else the config's `scheduler`.
- `cluster="slurm"`: the job and its sidecar carry the guarded marker in `--comment`; a job array (`map_array`,
  `batch()`) is one run record per task, all watched by one watcher job. A sweep (`submit` in a loop) reuses the
  run name (and folders) of its own earlier jobs without tripping the checks.
- `cluster="local"`: the same batch script runs as a job of the local backend (no srun), its sidecar as a
  second local job; a STOP ends the job's process group, so the function really stops.
- `cluster="debug"`: the pre-flight runs, then submitit runs the function in this process at `result()`.
A job the guard stopped says so: `job.guard_stop` (the verdict), and `result()` raises GuardStoppedError.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
import typing as tp
import uuid
import warnings
from collections.abc import Mapping
from pathlib import Path

import submitit
from submitit.core import core, utils
from submitit.core.core import Job
from submitit.core.utils import DelayedSubmission
from submitit.slurm.slurm import SlurmExecutor, SlurmJob

from guarded_sbatch.core import door
from guarded_sbatch.core.check_names import CHECK_NAMES
from guarded_sbatch.core.config import Config, load_config
from guarded_sbatch.core.errors import BlockedError, UsageError
from guarded_sbatch.core.redact import redact
from guarded_sbatch.sbatch.argv import LaunchArgs, split_sbatch_argv
from guarded_sbatch.core.waiting import Waiting, tell
from guarded_sbatch.sbatch.guard_options import (
    GuardOption, build_guard_options, executor_keywords, guard_pairs, keyword_words, take_keywords,
)
from guarded_sbatch.launch.job_folder import JOB_UMASK, check_result, make_job_folder, private_job_folder
from guarded_sbatch.launch.pipeline import (
    carry_out, check_launch, choose_backend, follow_line, guarded_scheduler, plan_launch,
)
from guarded_sbatch.launch.preflight import PreflightReport
from guarded_sbatch.launch.results import API_WORDS, CheckResult, CheckStatus
from guarded_sbatch.scheduler import backend_names, backend_traits, get_scheduler
from guarded_sbatch.scheduler.interface import JobInfo, Scheduler

StrPath = tp.Union[str, "os.PathLike[str]"]
# The executor's guard keywords (tb_dir=, config=, waivers=, ...) are the `keyword`s of the guard option table
# (sbatch/guard_options.py): each becomes its option on the launch's argv, and the pre-flight's hints name them
# (`config=`, not --guard-config).
_WAIVE = re.compile(r"--guard-waive[ =]([A-Za-z_-]+|CHECK|NAME)=(\"[^\"]*\"|\S+)")
EVIDENCE_WAIT_S = 30.0  # a stopped job's sidecar writes its evidence just after the cancel


class GuardStoppedError(utils.UncompletedJobError):
    """The job was stopped by its guard (a STOP verdict): no result, and the reason."""


class GuardedExecutor(submitit.AutoExecutor):
    """A submitit executor whose every job goes through the pre-flight and gets a sidecar."""

    def __init__(self, folder: StrPath, *, cluster: str | None = None, **kwargs: tp.Any) -> None:
        """`folder` and `cluster` as submitit's; the guard's keywords are those of the guard option table
        (sbatch/guard_options.py): run_name, tb_dir, wandb_dir, log_path, config, reference, checkpoint_dir,
        artifact_dir, notes_path, stop_command, monitor, seconds_per_epoch, epochs, restart=True and
        waivers={"CHECK": "why"}; every other keyword is submitit's."""
        if cluster not in (None, "debug", *backend_names()):
            named = ", ".join(repr(name) for name in backend_names())
            raise UsageError(f"GuardedExecutor runs on cluster={named} or 'debug', not {cluster!r}")
        guard = take_keywords(kwargs)  # the rest is submitit's
        waivers: Mapping[str, str] = guard.get("waivers") or {}
        for check in waivers:
            if check not in CHECK_NAMES:
                raise UsageError(f"cannot waive {check!r}: the checks are {', '.join(CHECK_NAMES)}")
        run_name: str | None = guard.pop("run_name", None)
        restart = bool(guard.pop("restart", False))
        backend = "debug" if cluster == "debug" else choose_backend(load_config(), cluster)  # as the CLI's launch
        private_job_folder(Path(folder))  # before anything is written there: the user's own, 0700
        # every backend runs submitit's own batch script (without srun where jobs have no steps): one path for all
        super().__init__(Path(folder), cluster="debug" if backend == "debug" else "slurm", **kwargs)
        self.guard_backend = backend
        if backend != "debug" and not backend_traits(backend).multi_node:
            self._executor.update_parameters(use_srun=False)
        cwd = Path.cwd()
        self.submit_dir = cwd
        self.guard_words = keyword_words(guard, cwd)  # the guard options the keywords stand for
        build_guard_options(guard_pairs(self.guard_words))  # a bad value is one line now, not at the first submit
        self.guard_run_name = run_name
        self.guard_restart = restart
        self.last_preflight: list[CheckResult] = []
        self.last_report: PreflightReport | None = None
        self.run_ids: list[str] = []  # registry ids of the runs this executor submitted
        self._own_names: set[str] = set()  # run names of jobs this executor submitted (a sweep reuses them)
        self._run_dirs: dict[str, str] = {}  # job or task id -> its run's folder, as the launch recorded it
        if run_name:
            self.update_parameters(name=run_name)

    def run_name(self) -> str:
        name = self.guard_run_name or str(self._executor.parameters.get("job_name") or "")
        return name or "submitit"

    # submit, map_array, submit_array and batch() all come through here (AutoExecutor hands them to its executor)
    def _internal_process_submissions(self, delayed_submissions: list[DelayedSubmission]) -> list[Job[tp.Any]]:
        config = load_config()
        if self.guard_backend == "debug":
            script = _debug_script(self.run_name(), Path(self.folder))
            try:
                self._preflight(script, config, None)
            finally:
                door.remove_own_temp_dir(script.parent)  # the debug script's own folder
            return super()._internal_process_submissions(delayed_submissions)
        plain = tp.cast(SlurmExecutor, self._executor)  # holds the parameters AutoExecutor translated
        # one per submission, as submitit's array path makes its own copy: what a submission adds stays on it
        guarded = GuardedSlurmExecutor(self, config, plain)
        jobs = guarded._internal_process_submissions(delayed_submissions)
        self._own_names.add(self.run_name())
        return jobs

    def _guarded_job(self, folder: Path, job_id: str, tasks: int) -> Job[tp.Any]:
        """submitit's handle of a guarded job: sbatch's own (submitit asks Slurm) or one asking our backend."""
        native = backend_traits(self.guard_backend).sbatch_native
        job_class: type[Job[tp.Any]] = GuardedSlurmJob if native else GuardedSchedulerJob
        job = job_class(folder=folder, job_id=job_id, tasks=list(range(tasks)))
        tp.cast(_Guarded, job).guard_run_dir = self._run_dirs.get(job_id, "")
        tp.cast(_Guarded, job).guard_backend = self.guard_backend
        return job

    def _argv(self, script: Path) -> list[str]:
        """The guarded-sbatch command line this submission amounts to."""
        words = [f"--guard-run-name={self.run_name()}"]
        if self.guard_backend != "debug":
            words.append(f"--guard-backend={self.guard_backend}")
        words += self.guard_words
        if self.guard_restart or self.run_name() in self._own_names:  # a sweep continues its own run name
            words.append("--guard-restart")
        return [*words, str(script)]

    def _preflight(self, script: Path, config: Config, scheduler: Scheduler | None) -> tuple[LaunchArgs, PreflightReport]:
        launch = split_sbatch_argv(self._argv(script))
        report = check_launch(launch, config, scheduler, cwd=self.submit_dir)
        self.last_report, self.last_preflight = report, list(report.results)
        if not report.blocked:  # as the CLI's launch says it, in one line: a clear launch is not worth a page
            sys.stderr.write(redact(clear_line(report)) + "\n")
        if report.blocked:
            failed = "; ".join(f"{r.name}: {r.finding_for(API_WORDS)}" for r in report.results
                               if r.name in report.blocking_checks)
            raise BlockedError(api_words(f"submission blocked by the pre-flight: {failed}")
                               + ' (fix it, or waive with waivers={"CHECK": "reason"})')
        return launch, report

    def _submit_command_guarded(self, executor: SlurmExecutor, command: str, config: Config) -> Job[tp.Any]:
        """The submission of submitit's batch script (GuardedSlurmExecutor's `_submit_command`): the pre-flight, then
        the launch pipeline; submitit's handle of the job, its files named as submitit names them."""
        if not backend_traits(self.guard_backend).multi_node and executor._num_tasks() > 1:
            able = " or ".join(repr(name) for name in backend_names() if backend_traits(name).multi_node)
            raise UsageError(f"the {self.guard_backend} backend runs one task per job, not {executor._num_tasks()} "
                             f"(tasks_per_node x nodes): use cluster={able}, or one task")
        tmp_uuid = uuid.uuid4().hex
        script = utils.JobPaths.get_first_id_independent_folder(executor.folder) / f".submission_file_{tmp_uuid}.sh"
        door.write_new(script, executor._make_submission_file_text(command, tmp_uuid), 0o600)
        scheduler = guarded_scheduler(self.guard_backend, script)  # the user's comment: the script's #SBATCH line
        try:
            launch, report = self._preflight(script, config, scheduler)
        except BaseException:
            door.remove(script)
            raise
        tasks = executor.parameters.get("map_count")  # an array: its tasks come from the script's #SBATCH --array
        job_id = self._submit(launch, report, config, scheduler,
                              on_submitted=lambda job_id: _make_job_folders(executor.folder, job_id, tasks))
        job = self._guarded_job(executor.folder, job_id, executor._num_tasks())
        job.paths.move_temporary_file(script, "submission_file", keep_as_symlink=True)
        executor._write_job_id(job.job_id, tmp_uuid)
        executor._set_job_permissions(job.paths.folder)
        run = self.run_ids[-1] if self.run_ids and not tasks else job.job_id
        tell(follow_line("" if tasks else str(job.paths.stdout), run, array=bool(tasks)))  # a background start
        return job

    def _submit(self, launch: LaunchArgs, report: PreflightReport, config: Config, scheduler: Scheduler,
                on_submitted: tp.Callable[[str], None]) -> str:
        """submitit's batch script through the one launch pipeline (launch/pipeline.py), as the CLI's launches."""
        plan = plan_launch(launch, report, config, launched_by="submitit",
                           cwd=self.submit_dir, tracker={"submitit_folder": str(self.folder)},
                           continues_run=self.guard_restart)  # a sweep's --guard-restart continues no run
        launched = carry_out(plan, scheduler, config, on_submitted=on_submitted)
        for warning in launched.warnings:
            warnings.warn(f"guarded-sbatch: {warning}", RuntimeWarning, stacklevel=4)
        self.run_ids.extend(record.run_id for record in launched.records)
        self._run_dirs.update((record.job_id, str(record.folder)) for record in launched.records)
        return launched.submission.job_id


class GuardedSlurmExecutor(SlurmExecutor):
    """submitit's SlurmExecutor whose submission step, the `_submit_command` hook of submitit's PicklingExecutor, is the
    guarded launch of its GuardedExecutor; submitit's own steps pickle the function, write the batch script
    (`_make_submission_file_text`) and name the job's files. Made for one submission from the parameters of the
    AutoExecutor's SlurmExecutor (`plain`)."""

    def __init__(self, guard: GuardedExecutor, config: Config, plain: SlurmExecutor) -> None:
        super().__init__(plain.folder, max_num_timeout=plain.max_num_timeout, python=plain.python)
        self.update_parameters(**plain.parameters)
        # the job's result pickle and logs: the user's alone (launch/job_folder.py)
        self.parameters["setup"] = [JOB_UMASK, *(self.parameters.get("setup") or [])]
        self.guard = guard
        self.config = config

    def _submit_command(self, command: str) -> Job[tp.Any]:
        return self.guard._submit_command_guarded(self, command, self.config)

    def _internal_process_submissions(self, delayed_submissions: list[DelayedSubmission]) -> list[Job[tp.Any]]:
        if len(delayed_submissions) == 1:
            return super()._internal_process_submissions(delayed_submissions)  # through _submit_command
        # an array: submitit's SlurmExecutor submits one through a plain SlurmExecutor of its own (sbatch itself), so
        # its steps are said here: a pickle per task, one guarded submission, a guarded handle per task
        folder = utils.JobPaths.get_first_id_independent_folder(self.folder)
        door.make_dirs(folder)
        pickles = []
        for delayed in delayed_submissions:
            pickles.append(folder / f"{uuid.uuid4().hex}.pkl")
            delayed.set_timeout(self.parameters.get("time", 5), self.max_num_timeout)
            delayed.dump(pickles[-1])
        self.parameters["map_count"] = len(pickles)  # the script's #SBATCH --array
        array = self._submit_command(self._submitit_command_str)
        jobs = [self.guard._guarded_job(self.folder, f"{array.job_id}_{n}", array.num_tasks) for n in range(len(pickles))]
        for job, pickle in zip(jobs, pickles):
            job.paths.move_temporary_file(pickle, "submitted_pickle")
        return jobs


class _Guarded:
    """What a guarded job handle adds to submitit's: whether the guard stopped it, and why."""

    guard_run_dir = ""
    guard_backend = "local"  # the registry's name of the backend the job was submitted to

    @property
    def guard_stop(self) -> dict[str, tp.Any] | None:
        """The guard's STOP verdict for this job (decision, reason, message, last_step), or None."""
        verdict = self._evidence().get("verdict")
        return verdict if isinstance(verdict, dict) and verdict.get("decision") == "STOP" else None

    @property
    def guard_stop_action(self) -> str:
        """What the stop did, as its evidence says: the cancel, and when the job's processes ended."""
        return str(self._evidence().get("stop") or "")

    def _evidence(self) -> dict[str, tp.Any]:
        if not self.guard_run_dir:
            return {}
        try:
            evidence = json.loads(door.read(Path(self.guard_run_dir) / "evidence" / "evidence.json", 64 << 20,
                                            own=True).text())
        except (OSError, ValueError):
            return {}
        return evidence if isinstance(evidence, dict) else {}

    def wait(self) -> None:
        """submitit's wait, saying so (core/waiting.py): a line within 2 s, then progress at growing gaps (the
        guard may be deciding about the run meanwhile)."""
        job = tp.cast(Job[tp.Any], self)
        with Waiting(f"job {job.job_id} to end; its guard watches it (`guarded-sbatch show {job.job_id}`: its "
                     "verdict so far)"):
            while not job.done():
                time.sleep(1)

    def _guard_outcome(self) -> None:
        """Raise GuardStoppedError when the job has no result because its guard stopped it."""
        job = tp.cast(Job[tp.Any], self)
        check_result(job.paths.folder, job.paths.result_pickle)  # before submitit unpickles it
        if job.paths.result_pickle.exists() or not self.guard_run_dir:
            return
        if self.guard_stop is None:
            sys.stderr.write(f"guarded-sbatch: job {job.job_id} left no result; waiting up to {EVIDENCE_WAIT_S:.0f} s "
                             "for its guard's verdict\n")
        deadline = time.monotonic() + EVIDENCE_WAIT_S
        with Waiting(f"job {job.job_id}'s guard's verdict", said=True):
            while self.guard_stop is None and time.monotonic() < deadline and \
                    str(job.state).split(" ")[0] in ("CANCELLED", "RUNNING", "COMPLETING"):
                time.sleep(0.5)
        stop = self.guard_stop
        if stop is not None:
            action = f"; {self.guard_stop_action}" if self.guard_stop_action else ""
            raise GuardStoppedError(f"job {job.job_id} was stopped by its guard (STOP, {stop.get('reason')}: "
                                    f"{stop.get('message')}){action}; evidence in {self.guard_run_dir}/evidence")


class GuardedSlurmJob(_Guarded, SlurmJob[core.R]):
    def _get_outcome_and_result(self) -> tuple[str, tp.Any]:
        self._guard_outcome()
        return super()._get_outcome_and_result()


class GuardedSchedulerJob(_Guarded, core.Job[core.R]):
    """A job of a backend that is not sbatch itself (the local one, ...): its state and cancel are that backend's
    (Slurm's state names)."""

    def _local_info(self) -> JobInfo:
        return get_scheduler(self.guard_backend).info(self.job_id)

    @property
    def state(self) -> str:
        return self._local_info().state.value

    def done(self, force_check: bool = False) -> bool:
        return self._local_info().state.is_terminal

    def get_info(self, mode: str = "force") -> dict[str, str]:
        info = self._local_info()
        return {"JobID": self.job_id, "State": info.state.value, "ExitCode": str(info.exit_code)}

    def cancel(self, check: bool = True) -> None:
        get_scheduler(self.guard_backend).cancel(self.job_id)

    def _get_outcome_and_result(self) -> tuple[str, tp.Any]:
        self._guard_outcome()
        return super()._get_outcome_and_result()


def _make_job_folders(folder: Path, job_id: str, tasks: object) -> None:
    """The job's log folders (`logs/%j`), made the moment sbatch answers: Slurm cannot open a job's output in a
    folder that does not exist (the job fails at once, signal 53), and the sidecar is submitted only after."""
    ids = [job_id, *(f"{job_id}_{n}" for n in range(tasks))] if isinstance(tasks, int) else [job_id]
    for one in ids:
        try:
            make_job_folder(utils.JobPaths(folder, job_id=one).folder)
        except ValueError:  # `%a` in the folder names array tasks only: the job itself has no folder
            continue


def _debug_script(run_name: str, folder: Path) -> Path:
    """What the pre-flight reads for a debug job (run in this process): a one-line batch script."""
    script = door.make_temp_dir("guarded-debug-") / "debug.sh"
    door.write_new(script, f"#!/bin/bash\n#SBATCH --job-name={run_name}\npython -u -m submitit.core._submit {folder}\n")
    return script


def clear_line(report: PreflightReport) -> str:
    """A clear pre-flight in one line: which checks warned and which were waived (the findings in last_report)."""
    warned = [r.name for r in report.results if r.status is CheckStatus.WARNED]
    parts = [f"warned: {', '.join(warned)}" if warned else "",
             f"waived: {', '.join(f'{w.check} ({w.reason})' for w in report.waivers)}" if report.waivers else ""]
    said = "; ".join(part for part in parts if part)
    return (f"guarded-sbatch: pre-flight of {report.run_name or 'the run'} clear"
            + (f" ({said}; each finding in executor.last_report)" if said else ""))


def api_words(text: str) -> str:
    """A pre-flight hint as the API says it: `waivers={"CHECK": "REASON"}` and `config=` for the CLI's
    `--guard-waive CHECK="REASON"` and `--guard-config` (a check's templated fix is put in these words first,
    `CheckResult.finding_for(API_WORDS)`; this catches the flags the other findings name)."""
    def waiver(match: re.Match[str]) -> str:
        reason = match.group(2) if match.group(2).startswith('"') else f'"{match.group(2)}"'
        return f'waivers={{"{match.group(1)}": {reason}}}'

    text = _WAIVE.sub(waiver, text)
    for keyword, row in executor_keywords().items():
        def argument(match: re.Match[str], keyword: str = keyword, row: GuardOption = row) -> str:
            if not row.takes_value:
                return f"{keyword}=True"
            return f'{keyword}="{match.group(1)}"' if match.group(1) else f"{keyword}=..."

        text = re.sub(rf"{re.escape(row.flag)}(?:[ =]([A-Z]+)\b)?(?![\w-])", argument, text)
    return text


__all__ = ["GuardStoppedError", "GuardedExecutor", "GuardedSchedulerJob", "GuardedSlurmExecutor", "GuardedSlurmJob"]
