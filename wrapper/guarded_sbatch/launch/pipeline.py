"""One guarded launch, whatever its front end: the sbatch form and launcher commands (cli/launch.py), `run --`
(cli/run.py) and GuardedExecutor (launch/executor.py) all go pre-flight (`check_launch`) → a typed plan
(`plan_launch`: request, run name, sources, judge settings, waivers, sidecar options, array tasks) → submit, record,
audit (`carry_out`, through launch/submit.py), once. Nothing here prints: what a person should read comes back
(`Launched.warnings`) for the front end to say."""

from __future__ import annotations

import dataclasses
import os
import shlex
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from guarded_sbatch.records.audit import AuditLog
from guarded_sbatch.core.errors import GuardedError, NothingSubmittedError, UsageError
from guarded_sbatch.core.waiting import Waiting
from guarded_sbatch.judge.table import with_chance, policy_from_table, policy_table
from guarded_sbatch.records.registry import list_runs
from guarded_sbatch.launch.launcher_job import keep_with_run
from guarded_sbatch.launch.marking import MarkingScheduler
from guarded_sbatch.launch.monitor_registration import ARRAY_JOB_POLL_S, SharedMonitorOptions, array_watch_options
from guarded_sbatch.launch.preflight import run_preflight
from guarded_sbatch.launch.run_reference import save_config_snapshot
from guarded_sbatch.launch.submit import (
    GuardedSubmission,
    RecordFields,
    resources_from_config,
    submit_guarded,
)
from guarded_sbatch.scheduler import backend_traits, check_backend, get_scheduler, resolve_backend
from guarded_sbatch.scheduler.interface import Scheduler, SubmitRequest

if TYPE_CHECKING:
    from guarded_sbatch.core.config import Config
    from guarded_sbatch.records.registry import RunRecord
    from guarded_sbatch.sbatch.argv import LaunchArgs, ParsedOption
    from guarded_sbatch.sbatch.array import ArraySpec
    from guarded_sbatch.launch.preflight import PreflightReport
    from guarded_sbatch.launch.runconfig import RunConfig
    from guarded_sbatch.launch.source_plan import SourcePlan
    from guarded_sbatch.launch.submit import SidecarResources

BACKEND_ENV = "GUARDED_SBATCH_BACKEND"
NO_NOTES = ("no project notes file: a STOP will be in the sidecar's output and evidence but noted nowhere else; "
            "set notes = \"NOTES.md\" in ~/.config/guarded-sbatch/config.toml (or --guard-notes PATH)")


@dataclass(frozen=True)
class LaunchPlan:
    """Everything a launch submits and records, decided before anything is submitted."""

    request: SubmitRequest
    run_name: str
    sources: SourcePlan | None  # what the run writes, resolved by the pre-flight (each job's: `for_job`)
    since: float  # files older than this are not the run's own
    resources: SidecarResources
    shared: SharedMonitorOptions | None  # watched by one shared job (per-user mode; every job array)
    record: RecordFields  # judge settings, waivers, what its watcher is told, ...: the same from every front end
    run_config: RunConfig | None  # the config the run was launched with, kept beside its record
    keep_script: bool = False  # a script rendered from a launcher command: kept with the run as job.sbatch

    @property
    def array(self) -> ArraySpec | None:
        return self.sources.array if self.sources is not None else None

    def task_ids(self) -> Callable[[str], list[str]] | None:
        """The ids guarded one by one: each task of a job array (`<job>_<task>`), else the job itself."""
        array = self.array
        return array.task_ids if array is not None else None


@dataclass(frozen=True)
class Launched:
    submission: GuardedSubmission
    warnings: tuple[str, ...] = ()  # for the front end to say: the job runs anyway

    @property
    def records(self) -> tuple[RunRecord, ...]:
        """One run record per guarded job: each task of an array has its own."""
        return tuple(one.record for one in (self.submission.tasks or (self.submission,)))


def choose_backend(config: Config, requested: str | None) -> str:
    """A backend of the registry (scheduler/__init__.py) a launch can submit to: --guard-backend (the executor's
    `cluster=`), else GUARDED_SBATCH_BACKEND, else the config's `scheduler`."""
    if requested:
        return check_backend(requested, "from --guard-backend")
    if os.environ.get(BACKEND_ENV):
        return check_backend(os.environ[BACKEND_ENV], f"from {BACKEND_ENV}")
    return resolve_backend(config.scheduler)


def guarded_scheduler(backend: str, script: Path, command_line: tuple[ParsedOption, ...] = ()) -> Scheduler:
    """The backend a launch submits through: where the site's plugins see submissions (Slurm) every one marked
    (launch/marking.py: the training script's with the preflight marker, its guard's with the sidecar one)."""
    scheduler = get_scheduler(backend)
    return MarkingScheduler(scheduler, script, command_line) if scheduler.traits.marks_submissions else scheduler


def check_launch(launch: LaunchArgs, config: Config, scheduler: Scheduler | None, *, cwd: Path | None = None,
                 command_line: str = "", restart: bool | None = None) -> PreflightReport:
    """The pre-flight's report on a launch; `command_line` is the command that repeats it, when the checked
    script is not what the user typed (a launcher command's rendered script, `run --`, the executor)."""
    guard = launch.guard_options
    with Waiting(f"the pre-flight of {launch.script or '--wrap'} (it asks the scheduler about your jobs and reads "
                 "the run's folders)"):  # a second at most, unless the scheduler or a file system is slow
        report = run_preflight(launch, config, scheduler, restart=guard.restart if restart is None else restart,
                               cwd=cwd)
    if command_line:
        report = dataclasses.replace(report, launch_command=command_line)
    if notes_path(guard.notes, config, cwd or Path.cwd()) is None:
        report = dataclasses.replace(report, notes=(*report.notes, NO_NOTES))
    return report


def plan_launch(
    launch: LaunchArgs, report: PreflightReport, config: Config, *, launched_by: str,
    cwd: Path | None = None, script: Path | None = None, sbatch_options: tuple[str, ...] | None = None,
    run_name: str = "", name_job: bool = False, stop_command: str | None = None, output_log: Path | None = None,
    replay: tuple[str, tuple[str, ...], tuple[str, ...]] | None = None, tracker: Mapping[str, Any] | None = None,
    keep_script: bool = False, continues_run: bool | None = None,
) -> LaunchPlan:
    """The launch as it will be submitted and recorded. `script`/`sbatch_options`: what is submitted when that is
    not the checked launch as is; `run_name`: the name when the pre-flight found none (with `name_job`, the job is
    given the run's name when it has no --job-name of its own); `output_log`: where the
    command's output goes when not to the job's own stdout (`run --guard-tmux`); `replay`: (script, args,
    options) that `restart` repeats when not the submitted ones; `continues_run`: files written since the start
    of the run this one continues are its own (default: --guard-restart)."""
    guard = launch.guard_options
    cwd = cwd or Path.cwd()
    sources = report.source_plan
    name = report.run_name or run_name
    words = sbatch_options if sbatch_options is not None else without_options(launch, {"wait", "quiet"})
    if name_job and name and not any(o.name == "job-name" for o in launch.parsed_options):
        words = (f"--job-name={name}", *words)
        if sources is not None:  # $SLURM_JOB_NAME, %x
            sources = dataclasses.replace(sources, job_name=name)
    if sources is not None and output_log is not None:
        sources = dataclasses.replace(sources, output_pattern=str(output_log), error_pattern="")
    request = SubmitRequest(script=script or _script(launch), sbatch_options=words,
                            script_args=launch.script_args if script is None else (), workdir=cwd,
                            env=dict(sources.env) if sources is not None else {})
    array = sources.array if sources is not None else None
    record = RecordFields(
        launched_by=launched_by, waivers=tuple(w.to_json() for w in report.waivers),
        judge=loss_key_named(with_chance(judge_table(config), report.intended_run_config.values
                                         if report.intended_run_config else None), guard.loss_key),
        config_path=report.intended_config or "", total_steps=report.total_steps,
        planned_end=planned_end(report),
        checkpoint_dir=str(_absolute(guard.checkpoint_dir, cwd)) if guard.checkpoint_dir else "",
        artifact_dir=str(_absolute(guard.artifact_dir, cwd)) if guard.artifact_dir else "",
        tracker=dict(tracker or {}), script=replay[0] if replay else None,
        script_args=replay[1] if replay else None, sbatch_options=replay[2] if replay else None,
        guard_words=launch.guard_words,
        tb_paths=tuple(_absolute(p, cwd) for p in guard.tb), wandb_paths=tuple(_absolute(p, cwd) for p in guard.wandb),
        log_paths=(*(_absolute(p, cwd) for p in guard.log), *([output_log] if output_log and not sources else [])),
        watch=watch_table(config, stop_command=guard.stop_command or stop_command,
                          notes=notes_path(guard.notes, config, cwd), array=array is not None),
    )
    shared = shared_watch(config, name, array=array is not None, monitor=guard.monitor)
    since = own_files_since(report.run_name, cwd, restart=guard.restart if continues_run is None else continues_run)
    return LaunchPlan(request=request, run_name=name, sources=sources, since=since,
                      resources=resources_from_config(config), shared=shared, record=record,
                      run_config=report.intended_run_config,
                      keep_script=keep_script)


def carry_out(plan: LaunchPlan, scheduler: Scheduler, config: Config, *,
              on_submitted: Callable[[str], object] | None = None) -> Launched:
    """Submit the training job and its guard, record each run (its config kept beside it), audit the launch."""
    sources = plan.sources
    try:
        with job_umask(config.job_umask), Waiting(f"{scheduler.name} to take the job and its guard"):
            submission = submit_guarded(
                scheduler, plan.request, run_name=plan.run_name, resources=plan.resources,
                record=plan.record, on_training_submitted=on_submitted, shared=plan.shared, task_ids=plan.task_ids(),
                sources_for_job=(lambda job_id: sources.for_job(job_id, since=plan.since).to_json())
                if sources is not None else None,
            )
    except GuardedError as exc:
        if exc.message.startswith("training job ") or isinstance(exc, NothingSubmittedError):
            raise  # submit_guarded (or the refusal itself) says what became of the training job
        raise type(exc)(f"{exc.message} (if the training job was submitted, it runs unguarded: "
                        "watch it with `guarded-sbatch monitor --job ID`)", exit_code=exc.exit_code) from None
    launched = Launched(submission)
    warnings = [*_keep_with_runs(plan, launched.records)]
    for record in launched.records:
        warnings.extend(audit_launch(config, record))
    return dataclasses.replace(launched, warnings=tuple(warnings))


def follow_line(output: str, run_id: str, *, array: bool = False) -> str:
    """What a background start says last: where the job's output goes and how to follow the run."""
    where = f"its output goes to {output} (follow it: `tail -f {shlex.quote(output)}`); " \
        if output and "%" not in output and not array else ""
    status = "`guarded-sbatch status --collapse`" if array else "`guarded-sbatch status`"
    return f"guarded-sbatch: {where}{status} lists it, `guarded-sbatch show {run_id}` shows what its guard sees"


@contextmanager
def job_umask(octal: str) -> Iterator[None]:
    """The site's umask for guarded jobs (config `job_umask`) while they are submitted: sbatch hands the launching
    process's umask to the job (SLURM_UMASK), the local backend's supervisor inherits it."""
    if not octal:
        yield
        return
    previous = os.umask(int(octal, 8))
    try:
        yield
    finally:
        os.umask(previous)


def _keep_with_runs(plan: LaunchPlan, records: tuple[RunRecord, ...]) -> list[str]:
    warnings: list[str] = []
    for index, record in enumerate(records):
        try:
            save_config_snapshot(record, plan.run_config)
        except OSError as exc:
            warnings.append(f"could not keep the run's config with its record ({exc}); it cannot become a reference")
        if plan.keep_script:  # each run keeps its own copy; a backend that keeps its own has it once submitted
            last = index == len(records) - 1
            kept = keep_with_run(plan.request.script, record.folder,
                                 remove_original=last and backend_traits(record.backend).keeps_script_copy)
            record.script, record.script_args = str(kept), []
            record.save()
    return warnings


def audit_launch(config: Config, record: RunRecord) -> list[str]:
    """The site's audit trail (records/audit.py): the launch, and each waiver with its reason; what failed to be
    written, as warnings."""
    audit = AuditLog.from_config(config)
    job, run = record.job_id, record.run_name
    problems = [audit.record("launch", job=job, run=run, sidecar=record.sidecar_id or record.monitor_id,
                             backend=record.backend, script=record.script, submit_dir=record.submit_dir,
                             waivers=len(record.waivers), launched_by=record.launched_by)]
    problems += [audit.record("waiver", job=job, run=run, check=w.get("check", ""), reason=w.get("reason", ""))
                 for w in record.waivers]
    return [f"warning: the site's audit record was not written ({problem}); your job runs anyway"
            for problem in filter(None, problems)]


def judge_table(config: Config) -> dict[str, object]:
    """The config's [judge] thresholds, checked (names, ranges) and as the run's record keeps them."""
    where = ", ".join(map(str, config.sources)) or "config"
    return policy_table(policy_from_table(config.judge, where=where))


def loss_key_named(table: dict[str, Any], key: str | None) -> dict[str, Any]:
    """The recorded [judge] table with the loss named by --guard-loss-key (it wins over the config's)."""
    return {**table, "train_loss_key": key} if key else table


def shared_watch(config: Config, run_name: str, *, array: bool, monitor: str | None) -> SharedMonitorOptions | None:
    """The one job that watches this launch's runs: a job array's own watcher (one for all its tasks, never a
    sidecar per task), else the user's monitor job in per-user mode; None: a sidecar of its own."""
    if array:
        return array_watch_options(config, run_name or "array")
    job = config.sidecar
    if (monitor or job.mode) != "per-user":
        return None
    return SharedMonitorOptions(
        max_runs=job.max_runs_per_monitor, time_limit=job.monitor_time, partition=job.partition, qos=job.qos,
        account=job.account, mem=job.monitor_mem, template_dirs=tuple(config.template_dirs),
    )


def watch_table(config: Config, *, stop_command: str | None, notes: Path | None, array: bool) -> dict[str, Any]:
    """What every watcher of the run is told beyond its sources and thresholds, as its record keeps it (`watch`,
    read by sidecar/plan.py): the config's [sidecar] settings (an array's tasks asked about at most every
    ARRAY_JOB_POLL_S, all at once), the stop command, the notes file and which alerts to send."""
    sidecar = config.sidecar
    if array:
        sidecar = dataclasses.replace(sidecar, job_poll_s=min(sidecar.job_poll_s, ARRAY_JOB_POLL_S))
    return {"sidecar": dataclasses.asdict(sidecar), "stop_command": stop_command or "",
            "notes": str(notes) if notes else "",
            "alerts": {"on": sorted(config.notify_on), "wait_long_s": config.notify_wait_long_s}}


def notes_path(given: Path | None, config: Config, cwd: Path) -> Path | None:
    """The project notes file a STOP appends to: --guard-notes, else the config's `notes`; relative to cwd."""
    chosen = given or config.notes_path
    return _absolute(chosen, cwd) if chosen else None


def own_files_since(run_name: str | None, cwd: Path, *, restart: bool) -> float:
    """Files created before this are not the run's own: its submission, or for a restart the start of the
    run it continues (a restart keeps reading its own folder)."""
    now = time.time() - 1.0  # the compute node's clock may trail this one by a little
    if not restart or not run_name:
        return now
    earlier = [r for r in list_runs() if r.run_name == run_name and r.submit_dir == str(cwd)]
    if not earlier:
        return now
    previous = earlier[-1]
    return float(previous.sources.get("since") or previous.submitted_at or now)


def planned_end(report: PreflightReport) -> float | None:
    """The pre-flight's ETA (epoch seconds), when its check could tell."""
    for result in report.results:
        value = result.details.get("eta_epoch_s") if result.name == "eta" else None
        if isinstance(value, (int, float)):
            return float(value)
    return None


def without_options(launch: LaunchArgs, names: set[str]) -> tuple[str, ...]:
    """The option words for the scheduler without these options: --wait and --quiet are guarded-sbatch's to
    honour (a quiet sbatch prints no job id, a waiting one blocks before the sidecar is submitted)."""
    words = list(launch.sbatch_options)
    for option in launch.parsed_options:
        if option.name not in names:
            continue
        span = len(option.words)
        for start in range(len(words) - span + 1):
            if tuple(words[start:start + span]) == option.words:
                del words[start:start + span]
                break
    return tuple(words)


def _absolute(path: Path, cwd: Path) -> Path:
    path = Path(os.path.expanduser(path))
    return path if path.is_absolute() else cwd / path


def _script(launch: LaunchArgs) -> Path:
    if launch.script is None:
        raise UsageError("nothing to submit: give a batch script (guarded-sbatch [options] script.sh)")
    return launch.script
