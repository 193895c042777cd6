"""The own-folder check for a run that names no folder at all: its trainer writes its default folder under the job's
folder (HF Trainer `trainer_output/`, Lightning `lightning_logs/`, a bare `SummaryWriter()` `runs/`), and so does every
other such run launched from there. The sidecars still tell the runs' metrics apart (by the writers' hosts and
pids), but checkpoints and saved models land on each other: a warning naming the live runs and the fix."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

from guarded_sbatch.core.fsutil import read_bounded
from guarded_sbatch.records.registry import open_runs
from guarded_sbatch.launch.context import PreflightContext
from guarded_sbatch.launch.results import CheckName, CheckResult, CheckStatus
from guarded_sbatch.launch.source_plan import SourcePlan
from guarded_sbatch.scheduler.interface import JobState

NAME = CheckName.OWN_FOLDER.value
# the default folder, the code that writes there, and the word that names another folder instead
DEFAULT_FOLDERS = (
    ("trainer_output", re.compile(r"\b(?:TrainingArguments|SFTConfig)\s*\(|\bTrainer\s*\("), re.compile(r"\boutput_dir\b")),
    ("lightning_logs", re.compile(r"^\s*(?:import|from)\s+(?:pytorch_)?lightning\b", re.MULTILINE),
     re.compile(r"\b(?:default_root_dir|save_dir)\b")),
    ("runs", re.compile(r"\bSummaryWriter\s*\(\s*\)"), None),
)
NOTHING = "no folder of this run is known before it starts; nothing to compare with live runs"


Liveness = Callable[[list[dict[str, Any]], PreflightContext], tuple[dict[str, JobState | None], dict[str, str]]]


def defaults_shared(context: PreflightContext, liveness: Liveness) -> CheckResult:
    """PASSED, or WARNED when a live run from the same folder names no folder either (both write the defaults);
    `liveness`: own_folder's one query about the runs' jobs."""
    defaults = _default_folders(context)
    if not defaults or _names_places(context):
        return CheckResult(NAME, CheckStatus.PASSED, NOTHING)
    here = os.path.normpath(str(context.submit_dir or context.workdir))
    records = [raw for raw in open_runs() if not raw.get("ended") and _from(raw) == here and not _record_names(raw)]
    if not records:
        return CheckResult(NAME, CheckStatus.PASSED, NOTHING, (f"defaults: {', '.join(defaults)}",))
    live, _ = liveness(records, context)
    others = [f"{raw.get('run_name')} (job {raw.get('job_id')}, {state.value})" for raw in records
              if (state := live.get(str(raw.get("run_id")))) is not None]
    if not others:
        return CheckResult(NAME, CheckStatus.PASSED, NOTHING, (f"defaults: {', '.join(defaults)}",))
    shown = ", ".join(f"{os.path.join(here, d)}/" for d in defaults)
    return CheckResult(NAME, CheckStatus.WARNED,
                       f"run(s) {'; '.join(others)} launched from this folder name no folder either: both write the "
                       f"trainer's default {shown} (checkpoints and saved models of one over the other's); give each "
                       "run its own (output_dir / default_root_dir / logdir \"runs/${SLURM_JOB_ID}\")",
                       tuple(f"this run's trainer writes {d}/ by default" for d in defaults))


def _default_folders(context: PreflightContext) -> list[str]:
    program = context.program_path()
    if program is None:
        return []
    try:
        text = read_bounded(program, 1 << 20, head=True).decode("utf-8", "replace")
    except OSError:
        return []
    return [folder for folder, code, elsewhere in DEFAULT_FOLDERS
            if code.search(text) and not (elsewhere is not None and elsewhere.search(text))]


def _names_places(context: PreflightContext) -> bool:
    """Whether this run names any folder of its own, a job-unique one included (`runs/${SLURM_JOB_ID}`)."""
    plan = context.source_plan
    named = isinstance(plan, SourcePlan) and bool(plan.sources.places("tensorboard") or plan.sources.output_dirs)
    return named or bool(context.launch.guard_options.tb)


def _record_names(raw: dict[str, Any]) -> bool:
    sources = raw.get("sources") if isinstance(raw.get("sources"), dict) else {}
    assert isinstance(sources, dict)
    specs = sources.get("specs") if isinstance(sources.get("specs"), list) else []
    assert isinstance(specs, list)
    named_tb = any(isinstance(spec, dict) and spec.get("kind") == "tensorboard" for spec in specs)
    return bool(named_tb or sources.get("output_dirs") or raw.get("tb_paths"))


def _from(raw: dict[str, Any]) -> str:
    return os.path.normpath(str(raw.get("submit_dir") or ""))
