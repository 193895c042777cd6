"""Run the pre-flight checks, apply waivers, and report (text for people, JSON for tools)."""

from __future__ import annotations

import os
import shlex
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from guarded_sbatch.core.config import Config
from guarded_sbatch.core.waiting import fit  # the one wrapping rule: words and commands whole, paths at slashes
from guarded_sbatch.core.errors import UsageError
from guarded_sbatch.core.file_trust import outputs_note
from guarded_sbatch.sbatch.argv import LaunchArgs, Waiver
from guarded_sbatch.launch.checks.arguments import check_arguments
from guarded_sbatch.launch.checks.config_diff import check_config_diff
from guarded_sbatch.launch.checks.eta import check_eta
from guarded_sbatch.launch.checks.interpreter import check_interpreter
from guarded_sbatch.launch.checks.monitoring import check_monitoring
from guarded_sbatch.launch.checks.own_folder import check_own_folder
from guarded_sbatch.launch.checks.paths import check_paths
from guarded_sbatch.launch.checks.run_name import check_run_name, run_name_of
from guarded_sbatch.launch.context import PreflightContext, load_intended_config
from guarded_sbatch.launch.live_jobs import one_query
from guarded_sbatch.core.mounts import Mount
from guarded_sbatch.launch.reference_search import Reference, reference_from_path
from guarded_sbatch.launch.results import CheckName, CheckResult, CheckStatus
from guarded_sbatch.launch.run_reference import family_reference, healthy_reference, use_launcher_line
from guarded_sbatch.launch.runconfig import RunConfig
from guarded_sbatch.launch.source_plan import SourcePlan, plan_run_sources
from guarded_sbatch.sbatch.options import effective_options
from guarded_sbatch.sbatch.script import parse_script, parse_wrap
from guarded_sbatch.sbatch.script_shell import ARRAY_JOB_ENV
from guarded_sbatch.scheduler.interface import Scheduler

CHECKS: tuple[Callable[[PreflightContext], CheckResult], ...] = (
    check_config_diff, check_run_name, check_paths, check_interpreter, check_arguments, check_monitoring, check_eta,
    check_own_folder,
)


@dataclass(frozen=True)
class PreflightReport:
    results: tuple[CheckResult, ...]
    waivers: tuple[Waiver, ...]  # applied to a failed check: record them with the run
    refused_waivers: tuple[tuple[Waiver, str], ...] = ()  # (waiver, why it was refused)
    unused_waivers: tuple[Waiver, ...] = ()  # for checks that did not fail
    notes: tuple[str, ...] = ()  # e.g. #SBATCH lines sbatch will ignore
    run_name: str | None = None
    launch_command: str = ""  # ready to copy, shlex-quoted
    # what the launch takes on from the pre-flight (launch/pipeline.py), typed
    source_plan: SourcePlan | None = None  # the run's own sources; None when they could not be resolved
    intended_run_config: RunConfig | None = None  # the run's config, overrides applied
    intended_config: str | None = None  # its file
    reference: str | None = None  # the reference config it was diffed against
    total_steps: int | None = None  # from its config, for the live ETA
    workdir: str = ""

    @property
    def details(self) -> dict[str, object]:
        """The same facts by name (tests, tools)."""
        return {"workdir": self.workdir, "intended_config": self.intended_config, "reference": self.reference,
                "total_steps": self.total_steps, "source_plan": self.source_plan,
                "intended_run_config": self.intended_run_config}

    @property
    def blocked(self) -> bool:
        waived = {w.check for w in self.waivers}
        return any(r.status is CheckStatus.FAILED and r.name not in waived for r in self.results)

    @property
    def blocking_checks(self) -> list[str]:
        waived = {w.check for w in self.waivers}
        return [r.name for r in self.results if r.status is CheckStatus.FAILED and r.name not in waived]

    def to_json(self) -> dict[str, object]:
        return {
            "blocked": self.blocked,
            "blocking_checks": self.blocking_checks,
            "run_name": self.run_name,
            "checks": [r.to_json() | {"waived": any(w.check == r.name for w in self.waivers)} for r in self.results],
            "waivers": [w.to_json() for w in self.waivers],
            "refused_waivers": [w.to_json() | {"why": why} for w, why in self.refused_waivers],
            "unused_waivers": [w.to_json() for w in self.unused_waivers],
            "notes": list(self.notes),
            "launch_command": self.launch_command if not self.blocked else None,
        }


def run_preflight(
    launch: LaunchArgs,
    config: Config,
    scheduler: Scheduler | None,
    *,
    restart: bool = False,
    now: datetime | None = None,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    mounts: list[Mount] | None = None,
    swept_lr: tuple[float, ...] = (),
) -> PreflightReport:
    """Check a launch. Raises UsageError for input that cannot be checked at all (unreadable script, ...).
    swept_lr: for one combination of a sweep, the learning rates the sweep searches (check-sweep)."""
    environ = dict(os.environ if env is None else env)
    if launch.script is not None:
        script_path = launch.script if launch.script.is_absolute() else (cwd or Path.cwd()) / launch.script
        script = parse_script(script_path, environ, launch.script_args, known_job_env(cwd or Path.cwd()))
    elif launch.wrap is not None:
        script = parse_wrap(launch.wrap, environ)
    else:
        raise UsageError("nothing to check: give a batch script (or --wrap)")
    where = str(launch.script or "--wrap")
    directive_options = [(f"{where} line {d.line_number}", o) for d in script.directives for o in d.options]
    options = effective_options(launch.parsed_options, directive_options, environ)
    job_sees = exported_environment(options.get("export"), environ)
    array = options.has("array")  # a task's SLURM_ARRAY_* ids are the job's own: symbolic, filled per task
    if launch.script is not None and (job_sees is not None or array):  # the job sees another environment
        job_env = known_job_env(cwd or Path.cwd()) | (ARRAY_JOB_ENV if array else {})
        script = parse_script(script_path, job_sees[0] if job_sees else environ, launch.script_args, job_env,
                              job_sees[1] if job_sees else "")
    chdir = options.get("chdir")
    base = cwd or Path.cwd()
    workdir = (base / Path(chdir).expanduser()) if chdir else base
    context = PreflightContext(
        launch=launch,
        script=script,
        options=options,
        config=config,
        scheduler=one_query(scheduler),  # the user's jobs asked once for the whole pre-flight
        workdir=workdir,
        env={**environ, **script.variables},
        now=(now or datetime.now()).astimezone(),
        restart=restart or launch.guard_options.restart,
        mounts=mounts,
        submit_dir=base,
        swept_lr=swept_lr,
    )
    load_intended_config(context)
    if not use_launcher_line(context):  # no config file: the launcher line is diffed against its program's runs
        _find_reference(context, script_path=launch.script)
    source_problem = ""
    source_plan: SourcePlan | None = None
    try:
        source_plan = context.source_plan = plan_run_sources(context, now=time.time())
    except (OSError, ValueError) as exc:  # never block a launch on this: the sidecar then discovers, carefully
        source_problem = f"could not resolve the run's own sources: {exc}"
    results = tuple(check(context) for check in CHECKS)
    applied, refused, unused = _apply_waivers(results, launch.guard_options.waivers, config)
    notes = [f"{script.path} line {d.line_number}: {d.text!r} — {d.why}" for d in script.ignored_directives]
    if script.other_launchers:
        notes.append(
            f"{len(script.other_launchers)} more launcher line(s) after line "
            f"{script.launcher.line_number if script.launcher else '?'}; checked the first"
        )
    if script.launcher is None:
        notes.append("no launcher line (python / torchrun / accelerate launch / deepspeed / srun) found in the script")
    name, _ = run_name_of(context)
    notes.extend(source_plan.describe(_trackers_used(results)) if source_plan is not None else [source_problem])
    # outputs others can write never bear a STOP alone (core/file_trust.py): say so before the run starts
    umask = int(config.job_umask, 8) if config.job_umask else None  # the site's, which the launch applies
    notes.extend(filter(None, [outputs_note(base, umask, script_text=script.text)]))
    return PreflightReport(
        results=results,
        waivers=tuple(applied),
        refused_waivers=tuple(refused),
        unused_waivers=tuple(unused),
        notes=tuple(notes),
        run_name=name,
        launch_command=launch_command(launch),
        workdir=str(workdir),
        intended_config=str(context.intended.path) if context.intended and context.intended.path else None,
        reference=str(context.reference.config.path) if context.reference else None,
        total_steps=_total_steps(context),
        source_plan=source_plan,
        intended_run_config=context.intended,
    )


def _trackers_used(results: tuple[CheckResult, ...]) -> set[str]:
    """The tracker kinds the monitoring check found signs of (an import, a config key, a variable, a folder)."""
    found = next((r.details.get("trackers") for r in results if r.name == CheckName.MONITORING.value), None)
    return {t["kind"] for t in found if isinstance(t, dict)} if isinstance(found, list) else set()


def exported_environment(export: str | None, environ: Mapping[str, str]) -> tuple[dict[str, str], str] | None:
    """What a job script sees of the submitting environment under sbatch's --export (None: all of it, as is),
    and why it may see more (without ALL, Slurm loads the user's login environment on the node)."""
    items = [item for item in (export or "ALL").split(",") if item]
    if items == ["ALL"] or not items:
        return None
    named: dict[str, str] = {}
    for item in items:
        name, has_value, value = item.partition("=")
        if has_value:
            named[name] = value
        elif name in environ:
            named[name] = environ[name]
    if any(item.upper() == "ALL" for item in items):
        return {**environ, **named}, ""
    return named, f"--export={export} gives the job the user's login environment"


def known_job_env(submit_dir: Path) -> dict[str, str]:
    """The job's SLURM_* variables known before it is submitted (both backends set them alike)."""
    return {"SLURM_SUBMIT_DIR": str(submit_dir), "SLURM_SUBMIT_HOST": os.uname().nodename}


TOTAL_STEP_KEYS = ("max_steps", "total_steps", "train_steps", "num_train_steps", "train_iters", "max_iters", "steps")


def _total_steps(context: PreflightContext) -> int | None:
    """The run's planned number of steps, when its config says (for status's live ETA)."""
    config = context.intended
    if config is None:
        return None
    found = config.find(TOTAL_STEP_KEYS)
    if found is None:
        epochs, per_epoch = config.find(("epochs", "num_epochs", "max_epochs")), config.find(("steps_per_epoch",))
        if epochs is None or per_epoch is None:
            return None
        epoch_count, steps_each = _as_int(epochs[1]), _as_int(per_epoch[1])
        found = ("", epoch_count * steps_each if epoch_count and steps_each else None)
    total = _as_int(found[1])
    return total if total and total > 0 else None


def _as_int(value: object) -> int | None:
    try:
        return int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return None


def _find_reference(context: PreflightContext, script_path: Path | None) -> None:
    given = context.launch.guard_options.reference
    if given is not None:
        path = context.resolve(str(given))
        try:
            config = reference_from_path(path)
        except UsageError as exc:
            context.reference_problem = str(exc)
            return
        run_folder = path.is_dir()  # a run's folder: its events are its own (a config file's folder may hold any)
        context.reference = Reference(config, path if run_folder else path.parent, None,
                                      tb_dirs=(path,) if run_folder else ())
        return
    roots = list(dict.fromkeys([context.workdir, *([context.submit_dir] if context.submit_dir else [])]))
    if script_path is not None:
        script_dir = (script_path if script_path.is_absolute() else context.workdir / script_path).parent
        if script_dir not in roots:
            roots.append(script_dir)
    own_config = context.intended.path if context.intended is not None else None
    context.reference = family_reference(own_config)  # named with `guarded-sbatch reference RUN`
    if context.reference is not None:
        return
    # chosen only among the user's runs that finished healthy: a config that never ran (a sibling being tried,
    # one that diverged) is never the reference
    days = context.config.reference_max_age_days
    context.reference = healthy_reference(context.intended, roots, days)
    if context.reference is None and context.intended is not None:
        context.reference_problem = (f"no run of this project has finished healthy in the last {days:g} days "
                                     "(COMPLETED, its last check CONTINUE)")


def _apply_waivers(
    results: tuple[CheckResult, ...], waivers: tuple[Waiver, ...], config: Config
) -> tuple[list[Waiver], list[tuple[Waiver, str]], list[Waiver]]:
    failed = {r.name for r in results if r.status is CheckStatus.FAILED}
    applied: list[Waiver] = []
    refused: list[tuple[Waiver, str]] = []
    unused: list[Waiver] = []
    for waiver in waivers:
        if not config.can_waive(waiver.check):
            refused.append((waiver, f"the site makes {waiver.check} mandatory"))
        elif waiver.check in failed:
            applied.append(waiver)
        else:
            unused.append(waiver)
    return applied, refused, unused


def launch_command(launch: LaunchArgs) -> str:
    """The guarded-sbatch command that repeats this launch (waivers included), shlex-quoted for bash."""
    guard_words = [w for w in launch.guard_words if w not in ("--guard-json", "--json")]
    words = ["guarded-sbatch", *guard_words, *launch.sbatch_options]
    if launch.script is not None:
        words.append(str(launch.script))
        words.extend(launch.script_args)
    return shlex.join(words)


SYMBOLS = {CheckStatus.PASSED: "ok  ", CheckStatus.WARNED: "warn", CheckStatus.FAILED: "FAIL"}
COLOURS = {CheckStatus.PASSED: "\033[32m", CheckStatus.WARNED: "\033[33m", CheckStatus.FAILED: "\033[31m"}


def format_report(report: PreflightReport, *, color: bool, launching: bool = False, width: int | None = None) -> str:
    """The report for people. `width` (a terminal's): every line wrapped to it, continuation lines indented under
    their text; None (a pipe): one line per finding, for grep and logs."""
    def paint(text: str, status: CheckStatus) -> str:
        return f"{COLOURS[status]}{text}\033[0m" if color else text

    waived = {w.check: w.reason for w in report.waivers}
    lines = ["## Pre-flight" + (f" — {report.run_name}" if report.run_name else ""), ""]
    for result in report.results:
        tag = f"[{SYMBOLS[result.status]}]"
        suffix = f" (waived: {waived[result.name]})" if result.name in waived else ""
        # wrapped with a tag of no spaces (wrapping joins words by one), then the tag put back, painted
        head = _wrapped(f"{'#' * len(tag)} {result.name}: {result.finding}{suffix}", width, indent=" " * 7)
        lines.append(paint(tag, result.status) + head[len(tag):])
        lines.extend(_wrapped(f"         {item}", width, indent=" " * 11) for item in result.evidence)
    for waiver, why in report.refused_waivers:
        lines.append(_wrapped(f"waiver refused: {waiver.check} ({why})", width))
    for waiver in report.unused_waivers:
        lines.append(f"waiver not needed: {waiver.check} did not fail")
    lines.extend(_wrapped(f"note: {note}", width, indent="      ") for note in report.notes)
    lines.append("")
    if report.blocked:
        names = ", ".join(report.blocking_checks)
        lines.append(paint(_wrapped(f'BLOCKED by: {names}. Fix them, or waive one with --guard-waive NAME="reason".',
                                    width), CheckStatus.FAILED))
    else:
        waivers = " (waivers recorded with the run)" if report.waivers else ""
        if launching:  # the submission follows at once: no command to copy, nothing to run again
            lines.append(f"Clear{waivers}: submitting now.")
        else:
            lines.append(f"Clear to launch{waivers}. To submit it, run:")
            lines.append(_command_lines(report.launch_command, width))  # on lines of its own: ready to copy
    return "\n".join(lines)


def _command_lines(command: str, width: int | None) -> str:
    """The command indented by two; on a narrow terminal broken between its words with `\\` (still one command when
    pasted into a shell)."""
    if width is None or len(command) + 2 <= width:
        return f"  {command}"
    try:
        words = [shlex.quote(word) for word in shlex.split(command)]
    except ValueError:
        return f"  {command}"
    lines, current = [], "  "
    for word in words:
        if current.strip() and len(current) + len(word) + 3 > width:
            lines.append(current + " \\")
            current = "      "
        current += ("" if not current.strip() else " ") + word
    return "\n".join([*lines, current])


def _wrapped(line: str, width: int | None, indent: str = "  ") -> str:
    if width is None or len(line) <= width:
        return line
    return fit(line, max(width, 40), indent=indent)
