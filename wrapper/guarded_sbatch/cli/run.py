"""`guarded-sbatch run [guard options] [--guard-tmux NAME] -- COMMAND...`: a guarded run on a workstation
or an interactive node, without a batch script.

The pre-flight reads the command line itself (`python train.py ...`, `accelerate launch ...`, `torchrun ...`,
`deepspeed ...`) as the launcher line of a one-line script. A clean (or waived) launch then runs as a job of
the local backend, with its watcher as a second local job (`after:` the first), recorded in the registry like
any guarded run, so `status`, `kill` and `restart` work on it. With --guard-tmux NAME the command runs in a
new detached tmux session NAME (its output tee'd to a log the watcher reads); the local job lasts as long
as the session, and the watcher stops the run by interrupting, then killing, the session.

`guarded-sbatch stop TARGET` is cli/stop.py.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, cast

from guarded_sbatch.core.errors import BlockedError, ExitCode, UsageError
from guarded_sbatch.core.pychild import python_argv
from guarded_sbatch.core.redact import redact

if TYPE_CHECKING:
    from guarded_sbatch.core.config import Config
    from guarded_sbatch.core.sbatch.argv import LaunchArgs
    from guarded_sbatch.launch.preflight import PreflightReport
    from guarded_sbatch.launch.source_plan import SourcePlan
    from guarded_sbatch.launch.runconfig import RunConfig
    from guarded_sbatch.launch.results import CheckResult
    from guarded_sbatch.scheduler.interface import Scheduler

RUN_USAGE = ("usage: guarded-sbatch run [guard options] [--job-name NAME] [--time LIMIT] [--guard-tmux NAME] "
             "-- COMMAND...  (e.g. -- python train.py --config c.yaml)")
TMUX_STOP_GRACE_S = 20.0  # the watcher's stop command must end within stop_run's 60 s


def run_under_guard(argv: list[str], *, check_only: bool = False, color: bool = False, clear_line: str = "") -> int:
    from guarded_sbatch.cli.launch import NO_NOTES, notes_path
    from guarded_sbatch.core.config import load_config
    from guarded_sbatch.core.fsutil import private_dir, state_dir
    from guarded_sbatch.core.sbatch.argv import split_sbatch_argv
    from guarded_sbatch.launch.preflight import format_report, run_preflight
    from guarded_sbatch.scheduler.local import LocalScheduler

    if argv[:1] in (["-h"], ["--help"]):
        print(RUN_USAGE)
        return int(ExitCode.OK)
    if "--" not in argv:
        raise UsageError(f"the command to run goes after `--`; {RUN_USAGE}")
    split = argv.index("--")
    options, command = argv[:split], argv[split + 1:]
    if not command:
        raise UsageError(f"no command after `--`; {RUN_USAGE}")
    tmux, options = _take_tmux(options)
    if tmux and not check_only and "--guard-restart" in options:
        _wait_session_gone(tmux)  # the killed run's session may still be on its way out
    if tmux and not check_only and _tmux_session_exists(tmux):
        raise UsageError(f"tmux session {tmux} already exists: pick another --guard-tmux name or end that session")
    private_dir(state_dir() / "run-staging")
    staging = Path(tempfile.mkdtemp(prefix=time.strftime("%Y%m%d-%H%M%S-"), dir=state_dir() / "run-staging"))
    script = staging / "command.sh"  # what the pre-flight reads; also the job itself without tmux
    script.write_text("#!/bin/bash\n# written by guarded-sbatch run\nexport PYTHONUNBUFFERED=1\n"
                      f"exec {shlex.join(command)}\n", encoding="utf-8")
    launch = split_sbatch_argv([*options, str(script)])
    if launch.guard_options.backend not in (None, "local"):
        raise UsageError("`guarded-sbatch run` runs here (local backend); for Slurm use guarded-sbatch [options] COMMAND")
    config = load_config()
    scheduler = LocalScheduler()
    report = run_preflight(launch, config, scheduler, restart=launch.guard_options.restart)
    words = ["guarded-sbatch", "run", *options, *(["--guard-tmux", tmux] if tmux else []), "--", *command]
    report = dataclasses.replace(report, launch_command=shlex.join(words), results=tuple(
        _run_wording(result) for result in report.results))
    if notes_path(launch.guard_options.notes, config, Path.cwd()) is None:
        report = dataclasses.replace(report, notes=(*report.notes, NO_NOTES))
    text = format_report(report, color=color, launching=not check_only or bool(clear_line))
    if clear_line and not report.blocked:  # restart: what follows is the restart's, not a command to copy
        text = text.rsplit("\n", 1)[0] + "\n" + clear_line
    print(redact(text), file=sys.stderr)
    if check_only or report.blocked:
        shutil.rmtree(staging, ignore_errors=True)  # nothing runs from it
        if report.blocked and not check_only:
            raise BlockedError("launch blocked by the pre-flight: nothing was started; fix the failed checks above, "
                               "or waive one with --guard-waive CHECK=\"REASON\"")
        return int(ExitCode.BLOCKED if report.blocked else ExitCode.OK)
    job_script, stop_command = script, None
    log_paths: tuple[Path, ...] = ()
    plan = cast("SourcePlan | None", report.details.get("source_plan"))
    if tmux:
        job_script, log = _tmux_job(staging, tmux, command, dict(plan.env) if plan is not None else {})
        log_paths = (log,)
        stop_command = shlex.join([*python_argv("-m", "guarded_sbatch"), "stop", f"tmux:{tmux}",
                                   "--grace", str(TMUX_STOP_GRACE_S)])
    return _start(launch, report, config, scheduler, job_script, command, tmux, log_paths, stop_command)


def _run_wording(result: CheckResult) -> CheckResult:
    """The pre-flight reads the command as a one-line script (command.sh): a run has no script name to fall back on."""
    prefix = "no run name: sbatch would call it 'command.sh'; set --job-name"
    if result.finding.startswith(prefix):
        hint = result.finding[len(prefix):]
        return dataclasses.replace(result, finding=f"no run name: give --job-name NAME before the --{hint}")
    return result


def _take_tmux(options: list[str]) -> tuple[str | None, list[str]]:
    rest: list[str] = []
    name: str | None = None
    index = 0
    while index < len(options):
        word = options[index]
        if word == "--guard-tmux" or word.startswith("--guard-tmux="):
            if "=" in word:
                name = word.partition("=")[2]
            elif index + 1 < len(options):
                index += 1
                name = options[index]
            else:
                raise UsageError("--guard-tmux needs a session name, e.g. --guard-tmux=train-a")
            if not name or any(ch in name for ch in ":. '\"$`\\"):
                raise UsageError(f"--guard-tmux {name!r}: use a plain session name (letters, digits, - and _)")
        else:
            rest.append(word)
        index += 1
    return name, rest


def _tmux_session_exists(name: str) -> bool:
    from guarded_sbatch.actions.stop_targets import tmux_session_exists

    return tmux_session_exists(name)


def _wait_session_gone(name: str, timeout_s: float = 2 * TMUX_STOP_GRACE_S + 10) -> None:
    deadline = time.monotonic() + timeout_s
    while _tmux_session_exists(name) and time.monotonic() < deadline:
        time.sleep(0.5)


def _tmux_job(staging: Path, session: str, command: list[str], env: dict[str, str]) -> tuple[Path, Path]:
    """The local job of a tmux run: start the session, live as long as it does, exit with the command's
    status; cancelled, it stops the session (detached, so the job's own SIGKILL cannot cut that short).
    `env` (the run's W&B id, MLflow tag) is exported inside the session: a tmux server that is already running
    gives a new session its own environment, not the job's."""
    log, status = staging / "output.log", staging / "exit-status"
    inner = staging / "in-tmux.sh"
    exports = "".join(f"export {name}={shlex.quote(value)}\n" for name, value in env.items())
    inner.write_text(
        "#!/bin/bash\n# guarded-sbatch run: the command, inside its tmux session\nexport PYTHONUNBUFFERED=1\n"
        f"{exports}cd {shlex.quote(os.getcwd())}\n{shlex.join(command)} 2>&1 | tee -a {shlex.quote(str(log))}\n"
        f"echo \"${{PIPESTATUS[0]}}\" > {shlex.quote(str(status))}\n", encoding="utf-8")
    stopper = shlex.join([*python_argv("-m", "guarded_sbatch"), "stop", f"tmux:{session}",
                          "--grace", str(TMUX_STOP_GRACE_S)])
    outer = staging / "tmux-job.sh"
    outer.write_text(f"""#!/bin/bash
# guarded-sbatch run: the local job of tmux session {session}
stop() {{ setsid {stopper} >> {shlex.quote(str(staging / 'stop.log'))} 2>&1 < /dev/null & wait $!; exit 143; }}
trap stop TERM INT
env -u TMUX tmux new-session -d -s {shlex.quote(session)} "bash {shlex.quote(str(inner))}" || exit 1
echo "guarded-sbatch run: tmux session {session}; attach with: tmux attach -t {session}"
while tmux has-session -t ={shlex.quote(session)} 2>/dev/null; do sleep 1 & wait $!; done
exit "$(cat {shlex.quote(str(status))} 2>/dev/null || echo 1)"
""", encoding="utf-8")
    log.touch()
    return outer, log


def _start(launch: LaunchArgs, report: PreflightReport, config: Config, scheduler: Scheduler, job_script: Path,
           command: list[str], tmux: str | None, log_paths: tuple[Path, ...], stop_command: str | None) -> int:
    """Submit the command like the sbatch form: its sources pinned and recorded, the environment the pre-flight
    promised (WANDB_RUN_ID, WANDB_RESUME, MLFLOW_RUN_CONTEXT) given to the job."""
    from guarded_sbatch.cli.launch import _own_files_since, _planned_end, notes_path
    from guarded_sbatch.launch.run_reference import save_config_snapshot
    from guarded_sbatch.launch.submit import SidecarOptions, resources_from_config, submit_guarded
    from guarded_sbatch.scheduler.interface import SubmitRequest

    guard = launch.guard_options
    cwd = Path.cwd()

    def absolute(path: Path) -> Path:
        return path if path.is_absolute() else cwd / path

    sidecar_config = config.sidecar
    sidecar = SidecarOptions(
        tb_paths=tuple(map(absolute, guard.tb)), wandb_paths=tuple(map(absolute, guard.wandb)),
        log_paths=(*map(absolute, guard.log), *log_paths), stop_command=guard.stop_command or stop_command,
        notes_path=notes_path(guard.notes, config, cwd), fast_interval_s=sidecar_config.fast_interval_s,
        full_interval_s=config.check_interval_s, job_poll_s=sidecar_config.job_poll_s,
    )
    run_name = report.run_name or _program_stem(command)
    options = tuple(launch.sbatch_options)
    if not any(o.name == "job-name" for o in launch.parsed_options):
        options = (f"--job-name={run_name}", *options)
    plan = cast("SourcePlan | None", report.details.get("source_plan"))
    if plan is not None and not any(o.name == "job-name" for o in launch.parsed_options):
        plan = dataclasses.replace(plan, job_name=run_name)  # the name the job gets above, for $SLURM_JOB_NAME
    request = SubmitRequest(script=job_script, sbatch_options=options, workdir=cwd,
                            env=dict(plan.env) if plan is not None else {})
    since = _own_files_since(report.run_name, cwd, restart=guard.restart)
    submission = submit_guarded(
        scheduler, request, run_name=run_name, sidecar=sidecar, resources=resources_from_config(config),
        waivers=[w.to_json() for w in report.waivers],
        record_fields={
            **{key: str(absolute(path)) for key, path in
               (("checkpoint_dir", guard.checkpoint_dir), ("artifact_dir", guard.artifact_dir)) if path},
            "total_steps": report.details.get("total_steps"),
            "planned_end": _planned_end(report),
            "config_path": str(report.details.get("intended_config") or ""),
            "launched_by": "run",
        },
        sources_for_job=(lambda job_id: plan.for_job(job_id, since=since).to_json()) if plan is not None else None,
    )
    record = submission.record
    # what `restart` repeats: restart_launch_argv() gives [guard words] [options] -- COMMAND...
    record.sbatch_options = [*launch.sbatch_options, *([f"--guard-tmux={tmux}"] if tmux else [])]
    record.script, record.script_args = command[0], list(command[1:])
    record.log_paths = [str(absolute(p)) for p in guard.log]  # not the tmux log: a restart writes a new one
    record.save()
    try:
        save_config_snapshot(record, cast("RunConfig | None", report.details.get("intended_run_config")))
    except OSError as exc:
        print(f"guarded-sbatch: could not keep the run's config with its record ({exc}); it cannot become a "
              "reference", file=sys.stderr)
    print(submission.job_id)
    where = f"in tmux session {tmux} (tmux attach -t {tmux})" if tmux else "as a local process group"
    print(f"guarded-sbatch: running `{redact(shlex.join(command))}` {where} as local job {submission.job_id}; "
          f"its watcher is local job {submission.sidecar_id}; run folder {record.folder}", file=sys.stderr)
    return int(ExitCode.OK)


def _program_stem(command: list[str]) -> str:
    """A run without a name (run-name waived) is named after its program: `python train.py` → train."""
    words = [w for w in command if not w.startswith("-")]
    program = next((w for w in words[1:] if w.endswith(".py")), words[0] if words else "run")
    return Path(program).stem or "run"
