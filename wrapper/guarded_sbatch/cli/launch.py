"""`guarded-sbatch [sbatch options] script.sh [args]` and `guarded-sbatch check ...`."""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, cast

from guarded_sbatch.core.audit import AuditLog
from guarded_sbatch.core.errors import BlockedError, ExitCode, GuardedError, UsageError
from guarded_sbatch.core.jsonnum import dumps as json_dumps
from guarded_sbatch.core.redact import redact

if TYPE_CHECKING:
    from guarded_sbatch.core.config import Config
    from guarded_sbatch.core.registry import RunRecord
    from guarded_sbatch.core.sbatch.argv import LaunchArgs
    from guarded_sbatch.launch.launcher_job import LauncherJob
    from guarded_sbatch.launch.preflight import PreflightReport
    from guarded_sbatch.launch.source_plan import SourcePlan
    from guarded_sbatch.launch.runconfig import RunConfig
    from guarded_sbatch.scheduler.interface import Scheduler

BACKEND_ENV = "GUARDED_SBATCH_BACKEND"


def choose_backend(config: Config, requested: str | None) -> str:
    """slurm or local: --guard-backend, else GUARDED_SBATCH_BACKEND, else the config's choice."""
    from guarded_sbatch.scheduler import resolve_backend

    backend = requested or os.environ.get(BACKEND_ENV) or resolve_backend(config.scheduler)
    if backend not in ("slurm", "local"):
        raise UsageError(f"unknown backend {backend!r} (from --guard-backend or {BACKEND_ENV}): use slurm or local")
    return backend


def run_check(argv: list[str], *, color: bool) -> int:
    """`guarded-sbatch check`: the pre-flight alone."""
    return run_launch(argv, check_only=True, color=color)


def run_launch(argv: list[str], *, check_only: bool, color: bool, show_report: bool = True,
               clear_line: str = "") -> int:
    """A launch (or with check_only, its pre-flight alone). clear_line replaces the report's last line when
    the launch is clear (restart: what happens next is the restart's, not a command to copy)."""
    from guarded_sbatch.core.config import load_config
    from guarded_sbatch.core.sbatch.argv import split_sbatch_argv
    from guarded_sbatch.scheduler import get_scheduler

    launch = split_sbatch_argv(argv)
    refuse_own_options_after_script(launch, check_only=check_only)
    guard = launch.guard_options
    if guard.json and not check_only:
        raise UsageError("--json applies to `guarded-sbatch check` only (a launch prints what sbatch prints); "
                         "use `guarded-sbatch check --json [options] script.sh`, or --parsable for the job id alone")
    if launch.info_only and not check_only:
        return _pass_through_to_sbatch(launch.sbatch_options)
    if launch.script is None:
        raise UsageError("no batch script given: guarded-sbatch needs `[options] script.sh [args]` (--wrap is not guarded)")
    config = load_config()
    judge_table(config)  # a bad [judge] threshold is one line before anything runs
    # `guarded-sbatch [options] torchrun train.py ...`: a batch script is rendered from the launcher's template
    # and then checked and submitted like the user's own (launch/launcher_job.py)
    launcher_job = launcher_job_of(launch, config)
    if guard.print_script:
        sys.stdout.write(launcher_job.text if launcher_job else _script_text(launch.script))
        return int(ExitCode.OK)
    if launcher_job is None and not launch.script.is_file():
        where = "" if launch.script.is_absolute() else f" (relative to the folder you submit from, {Path.cwd()})"
        raise UsageError(f"batch script {launch.script} not found{where}; check the path")
    backend = choose_backend(config, guard.backend)
    scheduler = get_scheduler(backend)
    command_line = launch
    if launcher_job is not None:
        launch = _use_rendered_script(launch, launcher_job, backend)
    if backend == "slurm":  # the marker Slurm's site plugins look for (site/marking_scheduler.py)
        from guarded_sbatch.site.marking_scheduler import MarkingScheduler

        scheduler = MarkingScheduler(scheduler, _script(launch), launch.parsed_options)
    report = _preflight(launch, config, scheduler, launcher_job, command_line, check_only=check_only)
    _print_report(report, launch, check_only=check_only, show_report=show_report, clear_line=clear_line, color=color)
    if check_only:
        if guard.json:
            print(redact(json_dumps(report.to_json())))
        return int(ExitCode.BLOCKED if report.blocked else ExitCode.OK)
    if report.blocked:
        raise BlockedError(
            "launch blocked by the pre-flight: fix the failed checks above, or waive one with "
            "--guard-waive CHECK=\"REASON\""
        )
    if any(o.name == "test-only" for o in launch.parsed_options):  # sbatch's dry run: no job, no sidecar
        return _test_only(launch, backend, scheduler)
    return _submit(launch, report, config, scheduler, keep_script=launcher_job is not None)


def _preflight(launch: LaunchArgs, config: Config, scheduler: Scheduler, launcher_job: LauncherJob | None,
               command_line: LaunchArgs, *, check_only: bool) -> PreflightReport:
    """The pre-flight's report on the launch (a rendered launcher script: checked, its command the user's)."""
    from guarded_sbatch.launch.preflight import launch_command, run_preflight

    try:
        report = run_preflight(launch, config, scheduler, restart=command_line.guard_options.restart)
    finally:
        if launcher_job is not None and check_only:
            _script(launch).unlink(missing_ok=True)
    if launcher_job is not None:
        report = dataclasses.replace(report, launch_command=launch_command(command_line))
    if notes_path(command_line.guard_options.notes, config, Path.cwd()) is None:
        report = dataclasses.replace(report, notes=(*report.notes, NO_NOTES))
    return report


def _print_report(report: PreflightReport, launch: LaunchArgs, *, check_only: bool, show_report: bool,
                  clear_line: str, color: bool) -> None:
    """The report on stderr, unless it is not wanted (sbatch's --quiet) and the launch is clear."""
    from guarded_sbatch.launch.preflight import format_report

    quiet = _has(launch, "quiet") and not check_only  # sbatch's --quiet: only errors (a blocked launch says why)
    if (show_report and not quiet) or report.blocked:
        text = format_report(report, color=color, launching=not check_only or bool(clear_line))
        if clear_line and not report.blocked:
            text = text.rsplit("\n", 1)[0] + "\n" + clear_line
        print(redact(text), file=sys.stderr)


def refuse_own_options_after_script(launch: LaunchArgs, *, check_only: bool) -> None:
    """sbatch's rule: every word after the script is the script's. Our own options there are almost surely
    meant for us, so say where they go instead of passing them on silently."""
    for word in launch.script_args:
        name = word.partition("=")[0]
        if name.startswith("--guard-") or (check_only and name == "--json"):
            script = launch.script
            command = "guarded-sbatch check" if check_only else "guarded-sbatch"
            raise UsageError(f"{name} comes after the script {script}, so it would be one of the script's own "
                             f"arguments (as in sbatch); put it before the script: `{command} {name} ... {script}`")


def _test_only(launch: LaunchArgs, backend: str, scheduler: Scheduler) -> int:
    from guarded_sbatch.scheduler.interface import SubmitRequest

    words = [*launch.sbatch_options, str(launch.script), *launch.script_args]
    if backend == "slurm":
        return _pass_through_to_sbatch(tuple(words))
    from guarded_sbatch.scheduler.local import LocalScheduler

    request = SubmitRequest(script=_script(launch), sbatch_options=without_options(launch, {"wait", "quiet"}),
                            script_args=launch.script_args, workdir=Path.cwd())
    if not isinstance(scheduler, LocalScheduler):
        raise UsageError(f"--test-only is answered by sbatch or the local backend, not {scheduler.name}")
    print(scheduler.test_only(request), file=sys.stderr)
    return int(ExitCode.OK)


def launcher_job_of(launch: LaunchArgs, config: Config) -> LauncherJob | None:
    """The batch script to render when the launch names a launcher command (torchrun ...) instead of a script."""
    from guarded_sbatch.launch.launcher_job import build_launcher_job, launcher_command_of

    command = launcher_command_of(launch)
    return build_launcher_job(launch, command, config) if command else None


def _use_rendered_script(launch: LaunchArgs, launcher_job: LauncherJob, backend: str) -> LaunchArgs:
    from guarded_sbatch.launch.launcher_job import as_script_launch, staging_folder, write_job_script

    if backend != "slurm" and launcher_job.command.kind != "python":
        raise UsageError(f"a {launcher_job.command.kind} job needs Slurm (srun, scontrol); "
                         "use --guard-backend slurm, or give a python command for the local backend")
    return as_script_launch(launch, write_job_script(launcher_job, staging_folder()))


def _script_text(script: Path) -> str:
    from guarded_sbatch.core.sbatch.script import read_script_text

    return read_script_text(script)


def _submit(launch: LaunchArgs, report: PreflightReport, config: Config, scheduler: Scheduler, *,
            keep_script: bool = False) -> int:
    from guarded_sbatch.launch.submit import SidecarOptions, resources_from_config, submit_guarded
    from guarded_sbatch.scheduler.interface import SubmitRequest

    guard = launch.guard_options
    parsable, quiet, wait = _has(launch, "parsable"), _has(launch, "quiet"), wants_wait(launch, scheduler.name)
    os.environ.pop("SBATCH_WAIT", None)  # sbatch itself must not block before the sidecar is submitted
    sidecar_config = config.sidecar
    resources = resources_from_config(config)
    cwd = Path.cwd()
    sidecar = SidecarOptions(
        tb_paths=tuple(_absolute(p, cwd) for p in guard.tb), wandb_paths=tuple(_absolute(p, cwd) for p in guard.wandb),
        log_paths=tuple(_absolute(p, cwd) for p in guard.log), stop_command=guard.stop_command,
        notes_path=notes_path(guard.notes, config, cwd),
        fast_interval_s=sidecar_config.fast_interval_s,
        full_interval_s=config.check_interval_s,
        job_poll_s=sidecar_config.job_poll_s,
    )
    plan = cast("SourcePlan | None", report.details.get("source_plan"))
    shared = None
    if (guard.monitor or sidecar_config.mode) == "per-user":
        from guarded_sbatch.launch.monitor_registration import SharedMonitorOptions

        shared = SharedMonitorOptions(
            max_runs=sidecar_config.max_runs_per_monitor, time_limit=sidecar_config.monitor_time,
            partition=sidecar_config.partition, qos=sidecar_config.qos, account=sidecar_config.account,
            mem=sidecar_config.monitor_mem, fast_interval_s=sidecar_config.fast_interval_s,
            job_poll_s=sidecar_config.job_poll_s, template_dirs=tuple(config.template_dirs),
        )
    request = SubmitRequest(script=_script(launch), sbatch_options=without_options(launch, {"wait", "quiet"}),
                            script_args=launch.script_args, workdir=cwd,
                            env=dict(plan.env) if plan is not None else {})
    since = _own_files_since(report.run_name, cwd, restart=guard.restart)

    def announce(job_id: str) -> None:
        if not quiet:
            print(job_id if parsable else f"Submitted batch job {job_id}", flush=True)

    try:
        submission = submit_guarded(
            scheduler, request, run_name=report.run_name or "", sidecar=sidecar, resources=resources,
            waivers=[w.to_json() for w in report.waivers], on_training_submitted=announce,
            record_fields={
                **{key: str(_absolute(path, cwd)) for key, path in
                   (("checkpoint_dir", guard.checkpoint_dir), ("artifact_dir", guard.artifact_dir)) if path},
                "total_steps": report.details.get("total_steps"),
                "planned_end": _planned_end(report),
                "config_path": str(report.details.get("intended_config") or ""),
                "judge": judge_table(config),
            },
            sources_for_job=(lambda job_id: plan.for_job(job_id, since=since).to_json()) if plan is not None else None,
            shared=shared,
        )
    except GuardedError as exc:
        if exc.message.startswith("training job "):
            raise  # submit_guarded says what became of the training job
        raise type(exc)(f"{exc.message} (if the training job was submitted above, it runs unguarded: "
                        "watch it with `guarded-sbatch monitor --job ID`)", exit_code=exc.exit_code) from None
    from guarded_sbatch.launch.run_reference import save_config_snapshot

    try:
        save_config_snapshot(submission.record, cast("RunConfig | None", report.details.get("intended_run_config")))
    except OSError as exc:
        print(f"guarded-sbatch: could not keep the run's config with its record ({exc}); it cannot become a "
              "reference", file=sys.stderr)
    if keep_script:  # a script rendered from a launcher command: keep it with the run as job.sbatch
        from guarded_sbatch.launch.launcher_job import keep_with_run

        kept = keep_with_run(_script(launch), submission.record.folder,
                             remove_original=submission.record.backend == "slurm")
        submission.record.script, submission.record.script_args = str(kept), []
        submission.record.save()
    watcher = "shared monitor job" if submission.record.monitor_id else "sidecar job"
    if not quiet:
        print(f"guarded-sbatch: {watcher} {submission.sidecar_id} watches job {submission.job_id}; "
              f"run folder {submission.record.folder}", file=sys.stderr)
    audit_launch(config, submission.record, report)
    if submission.interrupted:
        print(f"guarded-sbatch: interrupted while submitting; the interrupt was held until job {submission.job_id} "
              f"had its {watcher} {submission.sidecar_id}: both run (`guarded-sbatch kill {submission.record.run_id}` "
              "stops them)", file=sys.stderr)
        return 130
    if wait:
        return wait_for_job(scheduler, submission.job_id, quiet=quiet)
    return int(ExitCode.OK)


def judge_table(config: Config) -> dict[str, object]:
    """The config's [judge] thresholds, checked (names, ranges) and as the run's record keeps them."""
    from guarded_sbatch.core.judge_table import policy_from_table, policy_table

    where = ", ".join(map(str, config.sources)) or "config"
    return policy_table(policy_from_table(config.judge, where=where))

NO_NOTES = ("no project notes file: a STOP will be in the sidecar's output and evidence but noted nowhere else; "
            "set notes = \"NOTES.md\" in ~/.config/guarded-sbatch/config.toml (or --guard-notes PATH)")


def notes_path(given: Path | None, config: Config, cwd: Path) -> Path | None:
    """The project notes file a STOP appends to: --guard-notes, else the config's `notes`; relative to cwd."""
    chosen = given or config.notes_path
    return _absolute(chosen, cwd) if chosen else None


def _has(launch: LaunchArgs, name: str) -> bool:
    return any(o.name == name for o in launch.parsed_options)


def wants_wait(launch: LaunchArgs, backend: str) -> bool:
    """sbatch's --wait, from the command line, SBATCH_WAIT or an #SBATCH line. The job is submitted without it
    (sbatch would block before the sidecar is submitted) and guarded-sbatch waits itself, once the guard is in
    place; an #SBATCH --wait cannot be taken out of a script that is submitted unchanged, so Slurm refuses it."""
    from guarded_sbatch.core.sbatch.script import parse_script

    in_script = launch.script is not None and any(
        option.name == "wait" for d in parse_script(_script(launch), dict(os.environ)).directives for option in d.options)
    if in_script and backend == "slurm":
        raise UsageError(f"{launch.script} has #SBATCH --wait, which would make sbatch block before the job's sidecar "
                         "is submitted; remove that line and give --wait on the command line instead")
    return in_script or _has(launch, "wait") or os.environ.get("SBATCH_WAIT", "") not in ("", "0")


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


WAIT_POLL_S = {"local": 1.0, "slurm": 10.0}  # Slurm: one squeue per 10 s, as sbatch --wait's own backoff


def wait_for_job(scheduler: Scheduler, job_id: str, *, quiet: bool) -> int:
    """Block until the job ends and exit with its code, as `sbatch --wait` does (a signal: 128 + signal)."""
    import time

    from guarded_sbatch.core.errors import SchedulerError

    if not quiet:
        print(f"guarded-sbatch: waiting for job {job_id} to end (--wait); Ctrl-C stops waiting, the job and its "
              "guard go on", file=sys.stderr, flush=True)
    poll = WAIT_POLL_S.get(scheduler.name, 10.0)
    while True:
        try:
            state = scheduler.state(job_id)
        except SchedulerError:
            state = None  # a controller hiccup: ask again
        if state is not None and state.is_terminal:
            break
        time.sleep(poll)
    code = scheduler.info(job_id).exit_code
    if not quiet:
        print(f"guarded-sbatch: job {job_id} ended: {state.value}", file=sys.stderr)
    if code is None:
        return 0 if state.value == "COMPLETED" else 1
    return 128 - code if code < 0 else code


def audit_launch(config: Config, record: RunRecord, report: PreflightReport) -> None:
    """The site's audit trail: the launch, and each waiver with its reason (core/audit.py)."""
    audit = AuditLog.from_config(config)
    job, run = record.job_id, record.run_name
    problems = [audit.record("launch", job=job, run=run, sidecar=record.sidecar_id,
                             backend=record.backend, script=record.script,
                             submit_dir=record.submit_dir,
                             waivers=len(report.waivers))]
    problems += [audit.record("waiver", job=job, run=run, check=w.check, reason=w.reason)
                 for w in report.waivers]
    for problem in filter(None, problems):
        print(f"guarded-sbatch: warning: the site's audit record was not written ({problem}); "
              "your job runs anyway", file=sys.stderr)


def _own_files_since(run_name: str | None, cwd: Path, *, restart: bool) -> float:
    """Files created before this are not the run's own: its submission, or for a restart the start of the
    run it continues (a restart keeps reading its own folder)."""
    import time

    from guarded_sbatch.core.registry import list_runs

    now = time.time() - 1.0  # the compute node's clock may trail this one by a little
    if not restart or not run_name:
        return now
    earlier = [r for r in list_runs() if r.run_name == run_name and r.submit_dir == str(cwd)]
    if not earlier:
        return now
    previous = earlier[-1]
    return float(previous.sources.get("since") or previous.submitted_at or now)


def _planned_end(report: PreflightReport) -> float | None:
    for result in report.results:
        value = result.details.get("eta_epoch_s") if result.name == "eta" else None
        if isinstance(value, (int, float)):
            return float(value)
    return None


def _absolute(path: Path, cwd: Path) -> Path:
    return path if path.is_absolute() else cwd / path


def _pass_through_to_sbatch(options: tuple[str, ...]) -> int:
    from guarded_sbatch.scheduler.slurm import sbatch_pass_through

    result = sbatch_pass_through(options)
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    return result.returncode


def _script(launch: LaunchArgs) -> Path:
    if launch.script is None:
        raise UsageError("nothing to submit: give a batch script (guarded-sbatch [options] script.sh)")
    return launch.script
