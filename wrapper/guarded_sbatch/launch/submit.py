"""Submit the training job unchanged, then its sidecar (to start after the job has started), and
record the run. The sidecar's script text comes from one pure function.

Everything that can fail (the run name, the template, every rendered value, the state folder) is
checked before the training job is submitted; if the sidecar still cannot be submitted, the training
job is cancelled and the error says so: a run never trains unguarded without the user being told."""

from __future__ import annotations

import dataclasses
import re
import shlex
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from guarded_sbatch.core import door
from guarded_sbatch.core.config import Config, SidecarJobSettings
from guarded_sbatch.core.errors import GuardedError, SchedulerError, UsageError
from guarded_sbatch.launch.monitor_registration import SharedMonitorOptions, register_with_monitor
from guarded_sbatch.launch.templates import check_run_name, load_template, render_template
from guarded_sbatch.records.registry import RunRecord, create_run, new_run_id, runs_root
from guarded_sbatch.scheduler.interface import Scheduler, SubmitRequest


@dataclass(frozen=True)
class SidecarResources:
    cpus: int = SidecarJobSettings.cpus
    mem: str = SidecarJobSettings.mem
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time_limit: str | None = None
    template: str = "sidecar.sbatch"
    template_dirs: tuple[Path, ...] = ()


def resources_from_config(config: Config) -> SidecarResources:
    """The sidecar job's resources as the site and user config set them."""
    job = config.sidecar
    return SidecarResources(
        cpus=job.cpus, mem=job.mem, partition=job.partition or None, account=job.account or None,
        qos=job.qos or None, time_limit=job.time or None, template=job.template,
        template_dirs=tuple(config.template_dirs),
    )


@dataclass(frozen=True)
class RecordFields:
    """What a run's record keeps of its launch beyond the job and its sidecar: the same fields from every front end
    (launch/pipeline.py fills them). `script`, `script_args` and `sbatch_options` are what `restart` repeats when
    that is not the submitted request (a `run --` command)."""

    launched_by: str = "cli"  # "cli" (guarded-sbatch), "run" (guarded-sbatch run --), "submitit" (GuardedExecutor)
    waivers: tuple[Mapping[str, str], ...] = ()
    judge: Mapping[str, Any] = field(default_factory=dict)  # the config's [judge] thresholds, as the sidecar reads them
    config_path: str = ""
    total_steps: int | None = None
    planned_end: float | None = None
    checkpoint_dir: str = ""
    artifact_dir: str = ""
    tracker: Mapping[str, Any] = field(default_factory=dict)
    script: str | None = None
    script_args: tuple[str, ...] | None = None
    sbatch_options: tuple[str, ...] | None = None
    guard_words: tuple[str, ...] = ()  # the launch's guard options as given (restart replays them)
    tb_paths: tuple[Path, ...] = ()  # the guard flags' sources (--guard-tb, --guard-wandb, --guard-log)
    wandb_paths: tuple[Path, ...] = ()
    log_paths: tuple[Path, ...] = ()
    watch: Mapping[str, Any] = field(default_factory=dict)  # what every watcher of the run is told (sidecar/plan.py)

    def values(self, request: SubmitRequest) -> dict[str, Any]:
        """The keyword arguments of records/registry.create_run for one job of this launch."""
        return {
            "script": self.script if self.script is not None else str(request.script),
            "script_args": list(self.script_args if self.script_args is not None else request.script_args),
            "sbatch_options": list(self.sbatch_options if self.sbatch_options is not None else request.sbatch_options),
            "submit_dir": str(request.workdir or Path.cwd()),
            "tb_paths": [str(p) for p in self.tb_paths], "wandb_paths": [str(p) for p in self.wandb_paths],
            "log_paths": [str(p) for p in self.log_paths], "watch": dict(self.watch), "waivers": [dict(w) for w in self.waivers],
            "judge": dict(self.judge), "config_path": self.config_path, "total_steps": self.total_steps,
            "planned_end": self.planned_end, "checkpoint_dir": self.checkpoint_dir, "artifact_dir": self.artifact_dir,
            "tracker": dict(self.tracker), "launched_by": self.launched_by, "guard_words": list(self.guard_words),
        }


@dataclass(frozen=True)
class GuardedSubmission:
    record: RunRecord
    job_id: str
    sidecar_id: str
    tasks: tuple[GuardedSubmission, ...] = ()  # a job array: each task's own record and sidecar
    interrupted: bool = False  # Ctrl-C came while submitting: taken only once the job was guarded


def sidecar_job_name(record: RunRecord) -> str:
    """The sidecar job's name: in its script's #SBATCH line (a site's own template, people reading it) and in its
    request (`SubmitRequest.job_name`, each backend's own way to say it)."""
    return f"sidecar-{check_run_name(record.run_name)}"[:128]


def sidecar_output(record: RunRecord) -> str:
    """Where the sidecar job's output goes (%j: its id), in its script and in its request like its name."""
    return str(record.folder / "sidecar-%j.out")


def render_sidecar_script(
    template_text: str, record: RunRecord, resources: SidecarResources, *, python: str = sys.executable,
) -> str:
    """The sidecar's sbatch script: a pure function of the template, the run and its resources. Its command names
    the run's folder and nothing else: the watcher learns the rest from the record there (sidecar/plan.py)."""
    extra = []
    for flag, value in (("partition", resources.partition), ("account", resources.account),
                        ("qos", resources.qos), ("time", resources.time_limit)):
        if value:
            extra.append(f"#SBATCH --{flag}={value}")
    values = {
        "TRAIN_JOB_ID": record.job_id,
        "SIDECAR_JOB_NAME": sidecar_job_name(record),
        "SIDECAR_OUTPUT": sidecar_output(record),
        "SIDECAR_CPUS": str(resources.cpus),
        "SIDECAR_MEM": resources.mem,
        "SIDECAR_EXTRA_SBATCH": "\n".join(extra),
        "PYTHON": shlex.quote(python),
        "RUN_DIR": str(record.folder),
    }
    return render_template(template_text, values, template_name=resources.template)


def submit_guarded(
    scheduler: Scheduler,
    request: SubmitRequest,
    *,
    run_name: str,
    resources: SidecarResources,
    record: RecordFields | None = None,
    on_training_submitted: Callable[[str], object] | None = None,
    sources_for_job: Callable[[str], dict[str, object]] | None = None,
    shared: SharedMonitorOptions | None = None,
    task_ids: Callable[[str], Sequence[str]] | None = None,
) -> GuardedSubmission:
    """Submit training, then the sidecar. `on_training_submitted(job_id)` runs in between, so the
    caller can print sbatch's own line before anything else can fail. `task_ids(job_id)`: the ids to guard
    one by one (the tasks of a job array, `<job>_<n>`), each with its own record; by default the job itself.
    A job array is watched by one job (`shared`), never a sidecar per task."""
    template_text, _ = load_template(resources.template, list(resources.template_dirs))
    run_name = check_run_name(run_name or _fallback_name(request))
    # A trial render with a stand-in job id: a bad value fails here, before anything is submitted.
    trial = RunRecord(run_id=new_run_id(run_name, "0"), run_name=run_name, backend=scheduler.name, job_id="0")
    render_sidecar_script(template_text, trial, resources)
    try:
        door.make_private_dirs(runs_root())
    except OSError as exc:
        raise SchedulerError(f"cannot create the run registry {runs_root()}: {exc.strerror or exc}; "
                             "nothing was submitted") from None
    with _interrupts_deferred() as interrupted:
        try:
            job_id = scheduler.submit(request)
        except UsageError as exc:  # the backend refused the request itself: no job exists (a timed-out sbatch
            # may have queued one, so only this kind is said to be "not submitted")
            raise UsageError(f"training job not submitted: {exc.message}") from None
        if on_training_submitted is not None:
            on_training_submitted(job_id)
        fields = record or RecordFields()
        guarded: list[GuardedSubmission] = []
        try:
            for watched in task_ids(job_id) if task_ids is not None else [job_id]:
                watcher = guarded[-1].record.monitor_id if guarded else ""  # an array's tasks: one watcher
                guarded.append(_guard_submitted(scheduler, request, watched, run_name, template_text, resources,
                                                fields, sources_for_job, shared, watcher))
        except Exception as exc:  # noqa: BLE001 - whatever failed, the training job must not run unguarded
            raise _unguarded(scheduler, job_id, exc) from None
    submission = guarded[0] if task_ids is None else \
        GuardedSubmission(guarded[0].record, job_id, guarded[0].sidecar_id, tuple(guarded))
    return dataclasses.replace(submission, interrupted=bool(interrupted))


@contextmanager
def _interrupts_deferred() -> Iterator[list[int]]:
    """Ctrl-C between the training job's submission and its sidecar's would leave the job unguarded: SIGINT is
    blocked for that stretch (sbatch, started inside it, inherits the mask, so it cannot die halfway either)
    and taken afterwards. The list it yields gets an entry when an interrupt came; the caller says so."""
    if threading.current_thread() is not threading.main_thread():
        yield []
        return
    came: list[int] = []
    # the handler first: a SIGINT whose C handler ran just before the block would otherwise raise
    # KeyboardInterrupt at Python's next check, e.g. inside the fork of the training job's submission
    previous_handler = signal.signal(signal.SIGINT, lambda signum, frame: came.append(signum))
    previous_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield came
    finally:
        try:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)  # a pending SIGINT is taken here, into `came`
        finally:
            signal.signal(signal.SIGINT, previous_handler)


def _fallback_name(request: SubmitRequest) -> str:
    """A run without a name (run-name waived) is named after its script."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(str(request.script)).stem).strip("._-")
    return (stem or "run")[:100]


def _unguarded(scheduler: Scheduler, job_id: str, exc: BaseException) -> GuardedError:
    """The training job is submitted but its sidecar is not: cancel the job and say so."""
    why = exc.message if isinstance(exc, GuardedError) else f"{type(exc).__name__}: {exc}"
    why = " ".join(str(why).split())[:300]
    try:
        scheduler.cancel(job_id)
    except Exception as cancel_exc:  # noqa: BLE001 - report both failures in one line
        return SchedulerError(f"training job {job_id} was submitted but its sidecar could not be ({why}), and "
                              f"cancelling it failed ({cancel_exc}): it runs UNGUARDED; cancel it with "
                              f"`scancel {job_id}` or watch it with `guarded-sbatch monitor --job {job_id}`")
    code = exc.exit_code if isinstance(exc, GuardedError) else SchedulerError.exit_code
    return SchedulerError(f"training job {job_id} was cancelled: its sidecar could not be submitted ({why}); "
                          "fix that and submit again", exit_code=code)


def _guard_submitted(
    scheduler: Scheduler, request: SubmitRequest, job_id: str, run_name: str, template_text: str,
    resources: SidecarResources, fields: RecordFields,
    sources_for_job: Callable[[str], dict[str, object]] | None = None,
    shared: SharedMonitorOptions | None = None, watcher: str = "",
) -> GuardedSubmission:
    """One guarded job (or array task): its record, then its watcher. `watcher`: the shared job the array's earlier
    tasks registered with, recorded at once (the record is written once per task, not twice)."""
    record = create_run(run_name, scheduler.name, job_id, **fields.values(request),
                        sources=sources_for_job(job_id) if sources_for_job else {},
                        monitor_id=watcher if shared is not None else "")
    if shared is not None:  # per-user monitor mode: register with it instead of a sidecar of our own
        monitor_id = register_with_monitor(scheduler, record, shared)
        if monitor_id != record.monitor_id:
            record.monitor_id = monitor_id or ""  # not sidecar_id: kill/restart cancel that one, and it is shared
            record.save()
        if monitor_id is not None:
            return GuardedSubmission(record, job_id, monitor_id)
    script_text = render_sidecar_script(template_text, record, resources)
    script_path = record.folder / "sidecar.sbatch"
    door.write_atomic(script_path, script_text, 0o600)
    sidecar_id = scheduler.submit(SubmitRequest(script=script_path, workdir=record.folder, after=job_id,
                                                job_name=sidecar_job_name(record), output=sidecar_output(record)))
    record.sidecar_id = sidecar_id
    record.save()
    return GuardedSubmission(record, job_id, sidecar_id)
