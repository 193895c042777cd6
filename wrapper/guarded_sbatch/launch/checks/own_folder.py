"""Check: this run writes folders of its own — none that a live guarded run already writes.

Two runs writing one TensorBoard / output folder (one config launched twice, its `logdir` unchanged) mix their
files: each run's sidecar may judge the other's metrics. The run's folders (resolved at launch, as recorded)
are compared with those of every guarded run in the registry whose job the scheduler says is not over; a folder
equal to, inside or around one of theirs fails the check, with the fix. The file or folder of every other kind
named at launch (`RunSources.specs`, a JSON-lines file say) is compared the same way. A folder holding `${SLURM_JOB_ID}` is
this job's alone; a restart continues in the folders of the run it restarts.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from typing import Any

from guarded_sbatch.core.errors import GuardedError
from guarded_sbatch.core.fsutil import read_bounded
from guarded_sbatch.records.registry import ENDED, mark_over, open_runs
from guarded_sbatch.sbatch.script_shell import JOB_VARIABLE, fill_job_variables
from guarded_sbatch.launch.checks.own_folder_defaults import defaults_shared
from guarded_sbatch.launch.checks.run_name import is_per_job, per_job_folders, run_name_of
from guarded_sbatch.launch.context import PreflightContext
from guarded_sbatch.launch.live_jobs import snapshot_of
from guarded_sbatch.launch.results import CLI_WORDS, CheckName, CheckResult, CheckStatus, render_fix
from guarded_sbatch.launch.source_plan import SourcePlan
from guarded_sbatch.scheduler import get_scheduler
from guarded_sbatch.scheduler.interface import JobState, Scheduler
from guarded_sbatch.sources.kinds import place_of
from guarded_sbatch.sources.run_sources import SourceSpec, is_pinned

NAME = CheckName.OWN_FOLDER.value


@dataclass(frozen=True)
class Folder:
    path: str
    label: str  # where it came from: "--logdir", "config key logdir", "--guard-tb"
    is_file: bool = False  # a kind's file (its LaunchKind's place "file"), not a folder


def planned_folders(context: PreflightContext) -> list[Folder]:
    """This run's folders as far as they are known before its job exists (a `${SLURM_JOB_ID}` one is unique)."""
    folders: list[Folder] = []
    plan = context.source_plan
    if isinstance(plan, SourcePlan):
        sources = plan.sources
        labelled = [*((p, "output folder", False) for p in sources.output_dirs),
                    *((s.locator, s.origin, place_of(s.kind) == "file") for s in sources.specs if not is_pinned(s))]
        for path, label, is_file in labelled:
            if not is_per_job(path):
                folders.append(Folder(fill_job_variables(path, job_id="", job_name=plan.job_name), label, is_file))
    cwd = context.submit_dir or context.workdir
    for given in context.launch.guard_options.tb:
        folders.append(Folder(str(given if given.is_absolute() else cwd / given), "--guard-tb"))
    unique: dict[str, Folder] = {}
    for folder in folders:
        unique.setdefault(os.path.normpath(folder.path), folder)
    return [Folder(path, folder.label, folder.is_file) for path, folder in unique.items()]



def recorded_folders(raw: dict[str, Any]) -> list[str]:
    """The folders a run's record (run.json, as read) says it writes."""
    found = raw.get("sources")
    sources: dict[str, Any] = found if isinstance(found, dict) else {}
    specs = sources.get("specs")
    # a tracker run pinned by its id (a W&B run, the tagged run in an MLflow store) claims no place: a store is shared
    places = [s.locator for s in map(SourceSpec.from_json, specs) if s is not None and not is_pinned(s)] \
        if isinstance(specs, list) else []
    paths = [*_strings(sources.get("output_dirs")), *_strings(raw.get("tb_paths")),
             *(p for p in _strings(places) if p.startswith("/"))]
    kept = [os.path.normpath(p) for p in paths if p and not JOB_VARIABLE.search(p)]
    return list(dict.fromkeys(kept))


def _strings(value: object) -> list[str]:
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []


def overlaps(ours: str, theirs: str) -> bool:
    """One folder is the other, or holds it (event files are read from a folder's subfolders too)."""
    return ours == theirs or ours.startswith(theirs.rstrip("/") + "/") or theirs.startswith(ours.rstrip("/") + "/")


def check_own_folder(context: PreflightContext) -> CheckResult:
    folders = planned_folders(context)
    per_job = per_job_folders(context)
    if not folders and per_job:
        return CheckResult(NAME, CheckStatus.PASSED, f"this run writes {', '.join(per_job)}: new for each job, "
                           "no live run writes it")
    if not folders:
        return defaults_shared(context, _liveness)
    conflicts: list[str] = []
    unsure: list[str] = []
    evidence = [f"this run writes {f.path} ({f.label})" for f in folders]
    restarting = run_name_of(context)[0] if context.restart else None
    records = open_runs()  # ended runs are not even read: the registry's index knows them
    live, problems = _liveness(records, context)
    for raw in records:
        run_id = str(raw.get("run_id", ""))
        if raw.get("ended") or raw.get("run_name") == restarting or run_id not in live:
            continue  # over, or a restart continuing that run (once stopped)
        shared = [(f, theirs) for f in folders for theirs in recorded_folders(raw) if overlaps(f.path, theirs)]
        state = live[run_id]
        for folder, theirs in shared:
            where = theirs if theirs == folder.path else f"{theirs} (around or inside {folder.path})"
            line = f"{where} is written by run {raw.get('run_name')} (job {raw.get('job_id')}"
            if state is None:
                unsure.append(f"{line}; could not tell whether it still runs: {problems.get(run_id)})")
            else:
                conflicts.append(f"{line}, {state.value})")
                evidence.append(f"{folder.label} {folder.path} overlaps run {run_id}'s {theirs}")
    if conflicts:
        fix = _fix(folders[0], context)
        return CheckResult(NAME, CheckStatus.FAILED, f"{'; '.join(conflicts)}: {render_fix(fix, NAME, CLI_WORDS)}",
                           tuple(evidence), fix=fix)
    if unsure:
        return CheckResult(NAME, CheckStatus.WARNED, "; ".join(unsure), tuple(evidence))
    return CheckResult(NAME, CheckStatus.PASSED, f"no live guarded run writes {', '.join(f.path for f in folders)}",
                       tuple(evidence))


def _liveness(records: list[dict[str, Any]],
              context: PreflightContext) -> tuple[dict[str, JobState | None], dict[str, str]]:
    """The state of each open run's job that is not over, by run id (None: unknown, with why in the second
    dict), from ONE answer of each backend's scheduler about all of the user's jobs; the runs found over are
    marked so in the registry, never to be read or asked about again."""
    by_backend: dict[str, list[dict[str, Any]]] = {}
    for raw in records:
        by_backend.setdefault(str(raw.get("backend", "")), []).append(raw)
    live: dict[str, JobState | None] = {}
    problems: dict[str, str] = {}
    over: dict[str, str] = {}
    for backend, runs in by_backend.items():
        try:
            snapshot = snapshot_of(_scheduler_for(backend, context))
        except GuardedError as exc:
            live.update({str(raw.get("run_id")): None for raw in runs})
            problems.update({str(raw.get("run_id")): exc.message for raw in runs})
            continue
        for raw in runs:
            run_id, state = str(raw.get("run_id")), snapshot.state_of(str(raw.get("job_id")))
            if state is None and snapshot.may_be_newer(_number(raw.get("submitted_at"))):
                live[run_id] = JobState.PENDING  # recorded just now by another launch: its job is new
            elif state is None or state.is_terminal:
                over[run_id] = state.value if state is not None else ENDED  # not listed: over long ago
            else:
                live[run_id] = state
    try:
        mark_over(over)
    except OSError:
        pass  # remembering is best effort: the next launch asks again
    return live, problems


def _scheduler_for(backend: str, context: PreflightContext) -> Scheduler:
    own = context.scheduler
    return own if own is not None and own.name == backend else get_scheduler(backend)


def _number(value: object) -> float:
    return float(value) if isinstance(value, (int, float)) else 0.0


def _fix(folder: Folder, context: PreflightContext) -> str:
    """The fix in a form this script can take: the config key where the folder came from, the flag where the
    launcher line has it or the program parses it, else a folder of its own written into the script."""
    name = run_name_of(context)[0] or "<run name>"
    option = folder.label.rsplit(" ", 1)[-1].lstrip("-") if folder.label.startswith(("--", "config key")) else "logdir"
    option = option.rsplit(".", 1)[-1]
    parent = os.path.dirname(folder.path.rstrip("/")) or "."
    suffix = os.path.splitext(folder.path)[1] if folder.is_file else ""  # a file keeps its extension
    mine = os.path.relpath(os.path.join(parent, name + suffix), context.workdir)
    by_id = os.path.relpath(os.path.join(parent, "${SLURM_JOB_ID}" + suffix), context.workdir)
    ways: list[str] = []
    config_file = context.intended.path if context.intended is not None else None
    if folder.label.startswith("config key") and config_file is not None:
        shown = os.path.relpath(config_file, context.workdir)
        ways.append(f"set {folder.label.rsplit(' ', 1)[-1]}: {mine} in {shown} (or in a copy of it for this run)")
    if folder.label.startswith("--") or _program_parses(context, option):
        ways.append(f"--{option} {shlex.quote(mine)} on the launcher line (or after the script, when it passes "
                    f"\"$@\"), or --{option} \"{by_id}\" in the job script")
    if not ways:
        ways.append(f"make the job write to a folder of its own (e.g. \"{by_id}\" in the job script)")
    own = f"give this run its own {option}: " + "; or ".join(ways)
    return own.replace("{", "{{").replace("}", "}}") + "; or waive with {waive}"  # a template: see CheckResult.fix


def _program_parses(context: PreflightContext, option: str) -> bool:
    """Whether the training program names `--option` (an argparse/click flag it takes), read within bounds."""
    program = context.program_path()
    if program is None:
        return False
    try:
        text = read_bounded(program, 1 << 20, head=True).decode("utf-8", "replace")
    except OSError:
        return False
    return re.search(r"""["']--%s["']""" % re.escape(option).replace("_", "[-_]"), text) is not None
