"""GuardedExecutor: submitit's AutoExecutor with the launch pre-flight and a sidecar for every job.

    executor = GuardedExecutor(folder="logs/%j", run_name="cifar10-resnet18-bs128-lr0.1", tb_dir="runs/cifar")
    executor.update_parameters(timeout_min=60, slurm_partition="gpu")
    job = executor.submit(train, config)      # a submitit Job, as usual

Before anything is submitted, the checks that make sense for a function job run: the run name, the paths the
run depends on, and where the sidecar will read metrics (tb_dir / wandb_dir / log_path; by default the job's
own stdout, submitit's `%j_0_log.out`). A failed check blocks with BlockedError unless waived through
`waivers={"run-name": "why"}`. Each submitted job (each task of an array from `map_array`) gets its sidecar
and a record in the registry, so `guarded-sbatch status` and `kill` know it.

- `cluster="slurm"` (the default where Slurm answers): the job carries the guarded marker in `--comment`; its
  sidecar is a Slurm job (`--dependency=after:<job>`, `--kill-on-invalid-dep=yes`). A sweep (`submit` in a loop,
  `map_array`) reuses the run name of its own earlier jobs without tripping the run-name check.
- `cluster="local"`: submitit runs the job as a local process; its sidecar is a local process too (the
  `process` backend adopts the job's controller process and ends it on STOP).
- `cluster="debug"`: submitit runs the function inside this process at `result()`; the pre-flight runs, and
  there is no separate job for a sidecar to watch.
sbatch's refusals surface as the project's SchedulerError with sbatch's message inside.
"""

from __future__ import annotations

import contextlib
import os
import typing as tp
from collections.abc import Mapping
from pathlib import Path

import submitit
from submitit.core.core import Job
from submitit.core.utils import DelayedSubmission, FailedJobError, FailedSubmissionError
from submitit.slurm.slurm import SlurmExecutor

from guarded_sbatch.core.config import Config, load_config
from guarded_sbatch.core.errors import BlockedError, GuardedError, SchedulerError, UsageError
from guarded_sbatch.core.marker import PREFLIGHT, SIDECAR, comment_with_marker
from guarded_sbatch.core.registry import create_run
from guarded_sbatch.launch.checks.run_name import name_problem
from guarded_sbatch.launch.fsinfo import timed_stats
from guarded_sbatch.launch.results import CheckName, CheckResult, CheckStatus
from guarded_sbatch.launch.submit import SidecarOptions, render_sidecar_script, resources_from_config
from guarded_sbatch.launch.templates import check_run_name, load_template
from guarded_sbatch.scheduler import get_scheduler
from guarded_sbatch.scheduler.base import Scheduler, SubmitRequest
from guarded_sbatch.scheduler.process import job_id_for

FUNCTION_JOB_CHECKS = (CheckName.RUN_NAME.value, CheckName.PATHS.value, CheckName.MONITORING.value)
StrPath = tp.Union[str, "os.PathLike[str]"]


class GuardedExecutor(submitit.AutoExecutor):
    """A submitit executor that runs the pre-flight and co-schedules a sidecar for each job."""

    def __init__(
        self,
        folder: StrPath,
        *,
        run_name: str | None = None,
        tb_dir: StrPath | None = None,
        wandb_dir: StrPath | None = None,
        log_path: StrPath | None = None,
        checkpoint_dir: StrPath | None = None,
        artifact_dir: StrPath | None = None,
        waivers: Mapping[str, str] | None = None,
        stop_command: str | None = None,
        notes_path: StrPath | None = None,
        restart: bool = False,
        cluster: str | None = None,
        **kwargs: tp.Any,
    ) -> None:
        if cluster not in (None, "slurm", "local", "debug"):
            raise UsageError(f"GuardedExecutor runs on cluster='slurm', 'local' or 'debug', not {cluster!r}")
        for check in waivers or {}:
            if check not in FUNCTION_JOB_CHECKS:
                raise UsageError(f"cannot waive {check!r} for a function job: the checks are {', '.join(FUNCTION_JOB_CHECKS)}")
        super().__init__(Path(folder), cluster=cluster, **kwargs)
        cwd = Path.cwd()
        self.guard_run_name = run_name
        self.guard_tb_dir = _absolute(tb_dir, cwd)
        self.guard_wandb_dir = _absolute(wandb_dir, cwd)
        self.guard_log_path = _absolute(log_path, cwd)
        self.guard_checkpoint_dir = _absolute(checkpoint_dir, cwd)
        self.guard_artifact_dir = _absolute(artifact_dir, cwd)
        self.guard_waivers = dict(waivers or {})
        self.guard_stop_command = stop_command
        self.guard_notes_path = _absolute(notes_path, cwd)
        self.guard_restart = restart
        self.submit_dir = cwd
        self.last_preflight: list[CheckResult] = []
        self.run_ids: list[str] = []  # registry ids of the runs this executor submitted
        self._own_names: set[str] = set()  # run names of jobs this executor submitted (a sweep reuses them)
        if run_name:
            self.update_parameters(name=run_name)

    # submit, map_array, submit_array and batch() all come through here
    def _internal_process_submissions(self, delayed_submissions: list[DelayedSubmission]) -> list[Job[tp.Any]]:
        config = load_config()
        scheduler: Scheduler | None = get_scheduler("slurm") if self.cluster == "slurm" else None
        run_name = self.run_name()
        self.last_preflight = self.preflight(config, scheduler, run_name)
        blocking = [r for r in self.last_preflight if r.status is CheckStatus.FAILED and not self._waived(r, config)]
        if blocking:
            raise BlockedError("submission blocked by the pre-flight: " + "; ".join(f"{r.name}: {r.finding}" for r in blocking)
                               + " (fix it, or waive with waivers={\"CHECK\": \"reason\"})")
        check_run_name(run_name)  # before anything is queued: a bad name must not leave a job unguarded
        try:
            with self._marked_submissions():
                jobs = super()._internal_process_submissions(delayed_submissions)
        except (FailedJobError, FailedSubmissionError) as exc:
            message = " ".join(str(exc).split()) or type(exc).__name__
            raise SchedulerError(f"sbatch refused the submission: {message}") from None
        self._own_names.add(run_name)
        for job in jobs:
            if self.cluster == "slurm":
                self._guard(job, run_name, config, "slurm", job.job_id, get_scheduler("slurm"))
            elif self.cluster == "local":
                self._guard(job, run_name, config, "process", job_id_for(int(job.job_id)), get_scheduler("local"))
        return jobs

    @contextlib.contextmanager
    def _marked_submissions(self) -> tp.Iterator[None]:
        """Put the guarded marker on each sbatch call submitit makes (the digest of the file it submits).

        Patched on the class for the duration of this submission: submitit builds a fresh SlurmExecutor of its
        own for job arrays (map_array), and that one must mark its sbatch call too.
        """
        if self.cluster != "slurm":
            yield
            return
        make_command = SlurmExecutor._make_submission_command
        user_comment = self._executor.parameters.get("comment")

        def marked(executor: SlurmExecutor, submission_file_path: Path) -> list[str]:
            command = list(make_command(executor, submission_file_path))
            text = Path(submission_file_path).read_bytes()
            return [*command[:-1], f"--comment={comment_with_marker(user_comment, PREFLIGHT, text)}", command[-1]]

        SlurmExecutor._make_submission_command = marked  # type: ignore[method-assign,assignment]
        try:
            yield
        finally:
            SlurmExecutor._make_submission_command = make_command  # type: ignore[method-assign]

    def run_name(self) -> str:
        name = self.guard_run_name or str(self._executor.parameters.get("job_name") or "")
        return name or "submitit"

    def _waived(self, result: CheckResult, config: Config) -> bool:
        return result.name in self.guard_waivers and config.can_waive(result.name)

    def preflight(self, config: Config, scheduler: Scheduler | None, run_name: str) -> list[CheckResult]:
        """The pre-flight checks that apply to a function job: run name, paths, monitoring."""
        return [self._check_run_name(config, scheduler, run_name), self._check_paths(config), self._check_monitoring()]

    def _check_run_name(self, config: Config, scheduler: Scheduler | None, name: str) -> CheckResult:
        check = CheckName.RUN_NAME.value
        problem = name_problem(name, config.name_pattern, config.forbidden_names)
        if problem:
            return CheckResult(check, CheckStatus.FAILED, f"run name {name!r} {problem}; pass run_name=... like "
                               "coco-resnet50-bs256-lr3e-4")
        if self.guard_restart:
            return CheckResult(check, CheckStatus.PASSED, f"run name {name!r} follows the pattern (restart)")
        if name in self._own_names:
            return CheckResult(check, CheckStatus.PASSED, f"run name {name!r} follows the pattern; it is this "
                               "executor's own sweep")
        taken: list[str] = []
        try:
            if scheduler is not None and name in scheduler.active_job_names():
                taken.append(f"a queued or running job is already called {name!r}")
        except GuardedError as exc:
            return CheckResult(check, CheckStatus.WARNED, f"run name {name!r} follows the pattern; could not list jobs: {exc}")
        folders = [root / name for root in config.run_roots]
        taken += [f"output folder {o.path} already exists" for o in timed_stats(folders, config.stat_timeout_s) if o.exists]
        if taken:
            return CheckResult(check, CheckStatus.FAILED, f"run name {name!r} is taken: {'; '.join(taken)}; pick a new "
                               "name or pass restart=True")
        return CheckResult(check, CheckStatus.PASSED, f"run name {name!r} follows the pattern and is free")

    def _check_paths(self, config: Config) -> CheckResult:
        check = CheckName.PATHS.value
        # Each folder the run writes into must at least have an existing parent; submitit makes its own folder.
        wanted = {
            "submitit folder": _static_prefix(Path(self.folder)).parent,
            "TensorBoard folder": self.guard_tb_dir.parent if self.guard_tb_dir else None,
            "W&B folder": self.guard_wandb_dir.parent if self.guard_wandb_dir else None,
            "log file": self.guard_log_path.parent if self.guard_log_path else None,
            "checkpoint folder": self.guard_checkpoint_dir.parent if self.guard_checkpoint_dir else None,
            "artifact folder": self.guard_artifact_dir.parent if self.guard_artifact_dir else None,
        }
        labels = [(label, path) for label, path in wanted.items() if path is not None]
        outcomes = timed_stats([path for _, path in labels], config.stat_timeout_s)
        problems = []
        for (label, path), outcome in zip(labels, outcomes):
            if outcome.timed_out:
                problems.append(f"{label}: {path} did not answer in {config.stat_timeout_s:g} s")
            elif not outcome.exists or not outcome.is_dir:
                problems.append(f"{label}: {path} does not exist{f' ({outcome.error})' if outcome.error else ''}")
        evidence = tuple(f"{label}: {path}" for label, path in labels)
        if problems:
            return CheckResult(check, CheckStatus.FAILED, "; ".join(problems) + "; create it or fix the path", evidence)
        return CheckResult(check, CheckStatus.PASSED, f"all {len(labels)} folder(s) the run writes into are there", evidence)

    def _check_monitoring(self) -> CheckResult:
        check = CheckName.MONITORING.value
        given = [str(p) for p in (self.guard_tb_dir, self.guard_wandb_dir, self.guard_log_path) if p]
        if given:
            return CheckResult(check, CheckStatus.PASSED, f"the sidecar reads {', '.join(given)}")
        return CheckResult(check, CheckStatus.WARNED, "no tb_dir, wandb_dir or log_path: the sidecar reads only the "
                           "job's stdout (%j_0_log.out) as a text log")

    def _guard(self, job: Job[tp.Any], run_name: str, config: Config, backend: str, watched_id: str,
               sidecar_scheduler: Scheduler) -> None:
        """Record the run and submit its sidecar; the job is already queued, so a failure says it runs unguarded."""
        job_settings = config.sidecar
        resources = resources_from_config(config)
        stdout = Path(job.paths.stdout)
        logs = (self.guard_log_path,) if self.guard_log_path else (stdout,)
        options = SidecarOptions(
            tb_paths=(self.guard_tb_dir,) if self.guard_tb_dir else (),
            wandb_paths=(self.guard_wandb_dir,) if self.guard_wandb_dir else (),
            log_paths=logs, stop_command=self.guard_stop_command, notes_path=self.guard_notes_path,
            fast_interval_s=job_settings.fast_interval_s, full_interval_s=config.check_interval_s,
            job_poll_s=job_settings.job_poll_s,
        )
        try:
            template_text, _ = load_template(resources.template, list(resources.template_dirs))
            submission_file = Path(job.paths.submission_file)
            record = create_run(
                run_name, backend, watched_id, script=str(submission_file), submit_dir=str(self.submit_dir),
                tb_paths=[str(p) for p in options.tb_paths], wandb_paths=[str(p) for p in options.wandb_paths],
                log_paths=[str(p) for p in logs], checkpoint_dir=str(self.guard_checkpoint_dir or ""),
                artifact_dir=str(self.guard_artifact_dir or ""), launched_by="submitit",
                waivers=[{"check": c, "reason": r} for c, r in self.guard_waivers.items()],
                tracker={"submitit_folder": str(job.paths.folder), "submitit_job_id": str(job.job_id)},
            )
            script_path = record.folder / "sidecar.sbatch"
            script_text = render_sidecar_script(template_text, record, options, resources)
            script_path.write_text(script_text, encoding="utf-8")
            sbatch_options: tuple[str, ...] = ()
            if backend == "slurm":
                sbatch_options = (f"--dependency=after:{job.job_id}", "--kill-on-invalid-dep=yes",
                                  f"--comment={comment_with_marker(None, SIDECAR, script_text.encode('utf-8'))}")
            record.sidecar_id = sidecar_scheduler.submit(SubmitRequest(
                script=script_path, sbatch_options=sbatch_options, workdir=record.folder,
            ))
            record.save()
        except GuardedError as exc:
            raise type(exc)(f"job {job.job_id} was submitted but runs unguarded: {exc.message} (watch it with "
                            f"`guarded-sbatch monitor --job {job.job_id}`)", exit_code=exc.exit_code) from None
        except OSError as exc:
            raise SchedulerError(f"job {job.job_id} was submitted but runs unguarded: cannot write its run record "
                                 f"({exc.strerror or exc}); check GUARDED_SBATCH_STATE_DIR") from None
        self.run_ids.append(record.run_id)


def _absolute(path: StrPath | None, cwd: Path) -> Path | None:
    if path is None or os.fspath(path) == "":
        return None
    candidate = Path(path).expanduser()
    return candidate if candidate.is_absolute() else cwd / candidate


def _static_prefix(folder: Path) -> Path:
    """The part of a submitit folder before its first %-pattern (logs/%j → logs): the folder submitit creates."""
    parts: list[str] = []
    for part in folder.parts:
        if "%" in part:
            return Path(*parts)
        parts.append(part)
    return folder
