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
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from guarded_sbatch.core.errors import GuardedError, UsageError
from guarded_sbatch.core.fsutil import read_json
from guarded_sbatch.core.registry import RunRecord, runs_root
from guarded_sbatch.core.sbatch.script_shell import JOB_VARIABLE, fill_job_variables
from guarded_sbatch.launch.checks.run_name import run_name_of
from guarded_sbatch.launch.context import PreflightContext
from guarded_sbatch.launch.results import CheckName, CheckResult, CheckStatus
from guarded_sbatch.launch.source_plan import SourcePlan
from guarded_sbatch.scheduler import get_scheduler
from guarded_sbatch.scheduler.interface import JobState, Scheduler
from guarded_sbatch.sources.kinds import place_of

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
        labelled = [*((p, label, False) for p, label in zip(sources.tb_paths, sources.tb_from)),
                    *((p, "output folder", False) for p in sources.output_dirs),
                    *((s.locator, s.origin, place_of(s.kind) == "file") for s in sources.specs)]
        for path, label, is_file in labelled:
            if not re.search(r"SLURM_JOB_?ID", path):
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
    places = [spec.get("locator") for spec in specs if isinstance(spec, dict)] if isinstance(specs, list) else []
    paths = [*_strings(sources.get("tb_paths")), *_strings(sources.get("output_dirs")), *_strings(raw.get("tb_paths")),
             *(p for p in _strings(places) if p.startswith("/"))]
    kept = [os.path.normpath(p) for p in paths if p and not JOB_VARIABLE.search(p)]
    return list(dict.fromkeys(kept))


def _strings(value: object) -> list[str]:
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []


def _records() -> Iterator[dict[str, Any]]:
    """Every run.json of the registry, read as is: RunRecord is built only for the few that share a folder
    (a registry of thousands of runs is read on every launch)."""
    root = runs_root()
    if not root.is_dir():
        return
    for folder in root.iterdir():
        raw = read_json(folder / "run.json")
        if isinstance(raw, dict):
            yield raw


def overlaps(ours: str, theirs: str) -> bool:
    """One folder is the other, or holds it (event files are read from a folder's subfolders too)."""
    return ours == theirs or ours.startswith(theirs.rstrip("/") + "/") or theirs.startswith(ours.rstrip("/") + "/")


def check_own_folder(context: PreflightContext) -> CheckResult:
    folders = planned_folders(context)
    if not folders:
        return CheckResult(NAME, CheckStatus.PASSED, "no folder of this run is known before it starts; "
                           "nothing to compare with live runs")
    conflicts: list[str] = []
    unsure: list[str] = []
    evidence = [f"this run writes {f.path} ({f.label})" for f in folders]
    schedulers: dict[str, Scheduler] = {}
    restarting = run_name_of(context)[0] if context.restart else None
    for raw in _records():
        if raw.get("ended") or raw.get("run_name") == restarting:  # a restart continues that run, once stopped
            continue
        shared = [(f, theirs) for f in folders for theirs in recorded_folders(raw) if overlaps(f.path, theirs)]
        if not shared:
            continue
        try:
            record = RunRecord.from_json(raw)
        except UsageError:
            continue  # a record edited by hand: status says so
        state, problem = _job_state(record, context, schedulers)
        if state is not None and state.is_terminal:
            continue
        for folder, theirs in shared:
            where = theirs if theirs == folder.path else f"{theirs} (around or inside {folder.path})"
            line = f"{where} is written by run {record.run_name} (job {record.job_id}"
            if problem:
                unsure.append(f"{line}; could not tell whether it still runs: {problem})")
            else:
                conflicts.append(f"{line}, {state.value if state else 'UNKNOWN'})")
                evidence.append(f"{folder.label} {folder.path} overlaps run {record.run_id}'s {theirs}")
    if conflicts:
        return CheckResult(NAME, CheckStatus.FAILED, f"{'; '.join(conflicts)}: {_fix(folders[0], context)}",
                           tuple(evidence))
    if unsure:
        return CheckResult(NAME, CheckStatus.WARNED, "; ".join(unsure), tuple(evidence))
    return CheckResult(NAME, CheckStatus.PASSED, f"no live guarded run writes {', '.join(f.path for f in folders)}",
                       tuple(evidence))


def _job_state(record: RunRecord, context: PreflightContext,
               schedulers: dict[str, Scheduler]) -> tuple[JobState | None, str]:
    try:
        scheduler = schedulers.get(record.backend)
        if scheduler is None:
            own = context.scheduler
            scheduler = own if own is not None and own.name == record.backend else get_scheduler(record.backend)
            schedulers[record.backend] = scheduler
        state = scheduler.state(record.job_id)
    except GuardedError as exc:
        return None, exc.message
    if state is JobState.UNKNOWN:
        return None, "the scheduler did not say"
    return state, ""


def _fix(folder: Folder, context: PreflightContext) -> str:
    name = run_name_of(context)[0] or "<run name>"
    option = folder.label.rsplit(" ", 1)[-1].lstrip("-") if folder.label.startswith(("--", "config key")) else "logdir"
    option = option.rsplit(".", 1)[-1]
    parent = os.path.dirname(folder.path.rstrip("/")) or "."
    suffix = os.path.splitext(folder.path)[1] if folder.is_file else ""  # a file keeps its extension
    mine = os.path.relpath(os.path.join(parent, name + suffix), context.workdir)
    by_id = os.path.relpath(os.path.join(parent, "${SLURM_JOB_ID}" + suffix), context.workdir)
    return (f"give this run its own {option}: e.g. --{option} {shlex.quote(mine)} on the launcher line (or after the "
            f"script, when it passes \"$@\"), or --{option} \"{by_id}\" in the job script; or waive with "
            f"--guard-waive {NAME}=\"REASON\"")
