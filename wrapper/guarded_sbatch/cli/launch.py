"""`guarded-sbatch [sbatch options] script.sh [args]` and `guarded-sbatch check ...`."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

from guarded_sbatch.core.errors import BlockedError, ExitCode, GuardedError, UsageError
from guarded_sbatch.core.redact import redact

BACKEND_ENV = "GUARDED_SBATCH_BACKEND"


def choose_backend(config: object, requested: str | None) -> str:
    backend = requested or os.environ.get(BACKEND_ENV) or config.scheduler_backend()  # type: ignore[attr-defined]
    if backend not in ("slurm", "local"):
        raise UsageError(f"unknown backend {backend!r} (from --guard-backend or {BACKEND_ENV}): use slurm or local")
    return backend


def run_launch(argv: list[str], *, check_only: bool, color: bool) -> int:
    from guarded_sbatch.core.config import load_config
    from guarded_sbatch.core.sbatch.argv import split_sbatch_argv
    from guarded_sbatch.launch.preflight import format_report, launch_command, run_preflight
    from guarded_sbatch.scheduler import get_scheduler

    launch = split_sbatch_argv(argv)
    guard = launch.guard_options
    if launch.info_only and not check_only:
        return _pass_through_to_sbatch(launch.sbatch_options)
    if launch.script is None:
        raise UsageError("no batch script given: guarded-sbatch needs `[options] script.sh [args]` (--wrap is not guarded)")
    config = load_config()
    # `guarded-sbatch [options] torchrun train.py ...`: a batch script is rendered from the launcher's template
    # and then checked and submitted like the user's own (launch/launcher_job.py)
    launcher_job = launcher_job_of(launch, config)
    if guard.print_script:
        sys.stdout.write(launcher_job.text if launcher_job else _script_text(launch.script))
        return int(ExitCode.OK)
    if launcher_job is None and not launch.script.is_file():
        raise UsageError(f"batch script {launch.script} not found; check the path")
    backend = choose_backend(config, guard.backend)
    scheduler = get_scheduler(backend)
    command_line = launch
    if launcher_job is not None:
        launch = _use_rendered_script(launch, launcher_job, backend)
    if backend == "slurm":  # the marker Slurm's site plugins look for (site/marker.py)
        from guarded_sbatch.site.marker import MarkingScheduler

        scheduler = MarkingScheduler(scheduler, launch.script, launch.parsed_options)
    try:
        report = run_preflight(launch, config, scheduler, restart=guard.restart)
    finally:
        if launcher_job is not None and check_only:
            launch.script.unlink(missing_ok=True)  # type: ignore[union-attr]
    if launcher_job is not None:
        report = dataclasses.replace(report, launch_command=launch_command(command_line))
    print(redact(format_report(report, color=color)), file=sys.stderr)
    if check_only:
        if guard.json:
            print(redact(json.dumps(report.to_json(), default=str)))
        return int(ExitCode.BLOCKED if report.blocked else ExitCode.OK)
    if report.blocked:
        raise BlockedError(
            "launch blocked by the pre-flight: fix the failed checks above, or waive one with "
            "--guard-waive CHECK=\"REASON\""
        )
    return _submit(launch, report, config, scheduler, keep_script=launcher_job is not None)


def launcher_job_of(launch: object, config: object) -> object | None:
    from guarded_sbatch.launch.launcher_job import build_launcher_job, launcher_command_of

    command = launcher_command_of(launch)  # type: ignore[arg-type]
    return build_launcher_job(launch, command, config) if command else None  # type: ignore[arg-type]


def _use_rendered_script(launch: object, launcher_job: object, backend: str) -> object:
    from guarded_sbatch.launch.launcher_job import as_script_launch, staging_folder, write_job_script

    if backend != "slurm" and launcher_job.command.kind != "python":  # type: ignore[attr-defined]
        raise UsageError(f"a {launcher_job.command.kind} job needs Slurm (srun, scontrol); "  # type: ignore[attr-defined]
                         "use --guard-backend slurm, or give a python command for the local backend")
    return as_script_launch(launch, write_job_script(launcher_job, staging_folder()))  # type: ignore[arg-type]


def _script_text(script: Path) -> str:
    from guarded_sbatch.core.sbatch.script import read_script_text

    return read_script_text(script)


def _submit(launch: object, report: object, config: object, scheduler: object, *, keep_script: bool = False) -> int:
    from guarded_sbatch.launch.submit import SidecarOptions, SidecarResources, submit_guarded
    from guarded_sbatch.scheduler.base import SubmitRequest

    guard = launch.guard_options  # type: ignore[attr-defined]
    parsable = any(o.name == "parsable" for o in launch.parsed_options)  # type: ignore[attr-defined]
    sidecar_config = config.sidecar  # type: ignore[attr-defined]
    resources = SidecarResources(
        cpus=sidecar_config.cpus, mem=sidecar_config.mem, partition=sidecar_config.partition or None,
        account=sidecar_config.account or None, qos=sidecar_config.qos or None,
        time_limit=sidecar_config.time or None, template=sidecar_config.template,
        template_dirs=tuple(config.template_dirs),  # type: ignore[attr-defined]
    )
    cwd = Path.cwd()
    sidecar = SidecarOptions(
        tb_paths=tuple(_absolute(p, cwd) for p in guard.tb), wandb_paths=tuple(_absolute(p, cwd) for p in guard.wandb),
        log_paths=tuple(_absolute(p, cwd) for p in guard.log), stop_command=guard.stop_command,
        notes_path=_absolute(guard.notes, cwd) if guard.notes else None,
        fast_interval_s=sidecar_config.fast_interval_s,
        full_interval_s=config.check_interval_s,
        job_poll_s=sidecar_config.job_poll_s,
    )
    shared = None
    if (guard.monitor or sidecar_config.mode) == "per-user":
        from guarded_sbatch.launch.shared_monitor import SharedMonitorOptions

        shared = SharedMonitorOptions(
            max_runs=sidecar_config.max_runs_per_monitor, time_limit=sidecar_config.monitor_time,
            partition=sidecar_config.partition, qos=sidecar_config.qos, account=sidecar_config.account,
            mem=sidecar_config.monitor_mem, fast_interval_s=sidecar_config.fast_interval_s,
            job_poll_s=sidecar_config.job_poll_s, template_dirs=tuple(config.template_dirs),  # type: ignore[attr-defined]
        )
    request = SubmitRequest(script=launch.script, sbatch_options=launch.sbatch_options,  # type: ignore[attr-defined]
                            script_args=launch.script_args, workdir=cwd)  # type: ignore[attr-defined]

    def announce(job_id: str) -> None:
        print(job_id if parsable else f"Submitted batch job {job_id}", flush=True)

    try:
        submission = submit_guarded(
            scheduler, request, run_name=report.run_name, sidecar=sidecar, resources=resources,  # type: ignore[attr-defined]
            waivers=[w.to_json() for w in report.waivers], on_training_submitted=announce,  # type: ignore[attr-defined]
            record_fields={
                **{key: str(_absolute(path, cwd)) for key, path in
                   (("checkpoint_dir", guard.checkpoint_dir), ("artifact_dir", guard.artifact_dir)) if path},
                "total_steps": report.details.get("total_steps"),  # type: ignore[attr-defined]
                "planned_end": _planned_end(report),
            },
            shared=shared,
        )
    except GuardedError as exc:
        raise type(exc)(f"{exc.message} (if the training job was submitted above, it runs unguarded: "
                        "watch it with `guarded-sbatch monitor --job ID`)", exit_code=exc.exit_code) from None
    if keep_script:  # a script rendered from a launcher command: keep it with the run as job.sbatch
        from guarded_sbatch.launch.launcher_job import keep_with_run

        kept = keep_with_run(launch.script, submission.record.folder,  # type: ignore[attr-defined]
                             remove_original=submission.record.backend == "slurm")
        submission.record.script, submission.record.script_args = str(kept), []
        submission.record.save()
    watcher = "shared monitor job" if submission.record.monitor_id else "sidecar job"
    print(f"guarded-sbatch: {watcher} {submission.sidecar_id} watches job {submission.job_id}; "
          f"run folder {submission.record.folder}", file=sys.stderr)
    return int(ExitCode.OK)


def _planned_end(report: object) -> float | None:
    for result in report.results:  # type: ignore[attr-defined]
        if result.name == "eta" and isinstance(result.details.get("eta_epoch_s"), (int, float)):
            return float(result.details["eta_epoch_s"])
    return None


def _absolute(path: Path, cwd: Path) -> Path:
    return path if path.is_absolute() else cwd / path


def _pass_through_to_sbatch(options: tuple[str, ...]) -> int:
    from guarded_sbatch.core.runner import run_command

    result = run_command(["sbatch", *options], timeout=30, check=False)
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    return result.returncode
