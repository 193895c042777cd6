"""Check 2: run-name discipline — a plain-English name that follows the pattern and is not already taken."""

from __future__ import annotations

import re
from pathlib import Path

from guarded_sbatch.core.config import DEFAULT_NAME_PATTERN
from guarded_sbatch.core.errors import GuardedError
from guarded_sbatch.sources.place_keys import CHECKPOINT_DIR_KEYS, OUTPUT_KEYS
from guarded_sbatch.launch.checks import regressors as r
from guarded_sbatch.launch.context import PreflightContext
from guarded_sbatch.launch.fsinfo import timed_stats
from guarded_sbatch.launch.results import CheckName, CheckResult, CheckStatus
from guarded_sbatch.launch.runconfig import RunConfig

# where a run's folder is <place>/<name>: a source kind's folder key (a TensorBoard logdir) names the run's own folder
# already, and a live run writing it is the own-folder check's
NAMED_FOLDER_KEYS = (*OUTPUT_KEYS, *CHECKPOINT_DIR_KEYS)

NAME = CheckName.RUN_NAME.value
CONFIG_NAME_KEYS = ("run_name", "experiment_name", "exp_name", "wandb.name", "logger.name")
DATASET_KEYS = ("dataset", "dataset_name", "data.name", "task", "task_name")
MODEL_KEYS = ("model.name", "model_name", "arch", "model", "backbone")


def run_name_of(context: PreflightContext) -> tuple[str | None, str]:
    """The run's name and where it came from."""
    if context.launch.guard_options.run_name:
        return context.launch.guard_options.run_name, "--guard-run-name"
    if context.options.job_name:
        return context.options.job_name, f"--job-name ({context.options.source('job-name')})"
    if context.intended is not None:
        found = context.intended.find(CONFIG_NAME_KEYS)
        if found is not None and isinstance(found[1], str) and found[1] and "$" not in found[1]:
            return found[1], f"config key {found[0]}"
    return None, ""


def check_run_name(context: PreflightContext) -> CheckResult:
    name, source = run_name_of(context)
    suggestion = suggest_name(context.intended)
    hint = f" (e.g. {suggestion})" if suggestion else " like coco-resnet50-bs256-lr3e-4"
    if name is None:
        script = context.launch.script.name if context.launch.script else "wrap"
        return CheckResult(NAME, CheckStatus.FAILED,
                           f"no run name: sbatch would call it {script!r}; set --job-name{hint}")
    evidence = [f"name {name!r} from {source}"]
    problem = name_problem(name, context.config.name_pattern, context.config.forbidden_names)
    if problem:
        return CheckResult(NAME, CheckStatus.FAILED,
                           f"run name {name!r} {problem}; set another with --job-name NAME{hint}", tuple(evidence))
    if context.restart:
        evidence.append("restart: an existing job or folder with this name is expected")
        return CheckResult(NAME, CheckStatus.PASSED, f"run name {name!r} follows the pattern (restart)", tuple(evidence))
    collisions: list[str] = []
    warnings: list[str] = []
    if context.scheduler is not None:
        try:
            active = context.scheduler.active_job_names()
            evidence.append(f"{len(active)} queued/running job name(s) checked on {context.scheduler.name}")
            if name in active:
                collisions.append(f"a queued or running job is already called {name!r}")
        except GuardedError as exc:
            warnings.append(f"could not list queued jobs: {exc}")
    else:
        warnings.append("no scheduler: queued and running job names not checked")
    folders = output_folders(context, name)
    outcomes = timed_stats(folders, context.config.stat_timeout_s)
    for outcome in outcomes:
        if outcome.exists:
            collisions.append(f"output folder {outcome.path} already exists")
        elif outcome.timed_out:
            warnings.append(f"could not check {outcome.path} (no answer in {context.config.stat_timeout_s:g} s)")
    evidence.extend(f"checked {folder}" for folder in folders)
    if collisions:
        return CheckResult(NAME, CheckStatus.FAILED,
                           f"run name {name!r} is taken: {'; '.join(collisions)}; pick a new name or pass --guard-restart",
                           tuple(evidence))
    if warnings:
        return CheckResult(
            NAME, CheckStatus.WARNED, f"run name {name!r} follows the pattern; {'; '.join(warnings)}", tuple(evidence)
        )
    return CheckResult(NAME, CheckStatus.PASSED, f"run name {name!r} follows the pattern and is free", tuple(evidence))


def name_problem(name: str, pattern: str, forbidden: tuple[str, ...]) -> str | None:
    """Why `name` is not acceptable, or None."""
    if any(ch.isspace() for ch in name) or re.search(r"[^A-Za-z0-9._+-]", name):
        return "has spaces or characters beyond letters, digits, '.', '_', '+', '-'"
    for rule in forbidden:
        if re.fullmatch(rule, name, flags=re.IGNORECASE):
            return "is a session-local label that says nothing later (run-1, test, tmp, wave-2 ...)"
    if not re.fullmatch(pattern, name):
        if pattern == DEFAULT_NAME_PATTERN:
            return ("does not follow the rule: lowercase ASCII letters, digits and dots, in three or more parts "
                    "joined by hyphens, <dataset/task>-<model>-<key-config>[-<recipe-piece>] "
                    f"(pattern {pattern})")
        return f"does not match the site's name pattern {pattern}"
    return None


def output_folders(context: PreflightContext, name: str) -> list[Path]:
    """Where this run's outputs would land: <run root>/<name>, and output paths that end in the name."""
    folders = [root / name for root in context.config.run_roots]
    if context.intended is not None:
        for key, value in r.values_of(context.intended, NAMED_FOLDER_KEYS).items():
            if isinstance(value, str) and value and "$" not in value:
                path = context.resolve(value)
                folders.append(path if path.name == name else path / name)
    unique: list[Path] = []
    for folder in folders:
        if folder not in unique:
            unique.append(folder)
    return unique


def suggest_name(config: RunConfig | None) -> str | None:
    if config is None:
        return None
    parts: list[str] = []
    for keys in (DATASET_KEYS, MODEL_KEYS):
        found = config.find(keys)
        if found is not None and isinstance(found[1], str):
            parts.append(_slug(found[1].rsplit("/", 1)[-1]))
    batch = config.find(r.GLOBAL_BATCH + r.PER_DEVICE_BATCH + r.PLAIN_BATCH)
    if batch is not None and isinstance(batch[1], (int, float)):
        parts.append(f"bs{batch[1]:g}")
    lr = config.find(r.LEARNING_RATE)
    if lr is not None and isinstance(lr[1], (int, float)):
        parts.append(f"lr{_short_number(float(lr[1]))}")
    parts = [p for p in parts if p]
    return "-".join(parts) if len(parts) >= 3 else None


def _short_number(value: float) -> str:
    """3e-4 rather than 0.0003, as people write learning rates in names."""
    if value != 0 and abs(value) < 0.01:
        mantissa, exponent = f"{value:.2e}".split("e")
        return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"
    return f"{value:g}"


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-")
