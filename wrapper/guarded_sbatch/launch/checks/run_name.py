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
from guarded_sbatch.launch.source_plan import SourcePlan

# where a run's folder is <place>/<name>: a source kind's folder key (a TensorBoard logdir) names the run's own folder
# already, and a live run writing it is the own-folder check's
NAMED_FOLDER_KEYS = (*OUTPUT_KEYS, *CHECKPOINT_DIR_KEYS)

NAME = CheckName.RUN_NAME.value
# a value new for each launch: the job's id (`${SLURM_JOB_ID:-x}` too: a job always has one) or its array's. Not
# `$SLURM_ARRAY_TASK_ID` alone (the next launch of the array repeats it), nor `%j` (sbatch fills it in --output only)
_JOB_ID = re.compile(r"\$\{?SLURM_(?:ARRAY_)?JOB_?ID\b")


def is_per_job(path: str) -> bool:
    """A folder whose path holds the job's own id: each launch writes a new one, whatever its name."""
    return bool(_JOB_ID.search(path))


def per_job_folders(context: PreflightContext) -> list[str]:
    """The folders this run writes, when every one known at launch is per job (else none)."""
    plan = context.source_plan
    if not isinstance(plan, SourcePlan):
        return []
    logs = {plan.sources.stdout, plan.sources.stderr}
    folders = [path for path in plan.sources.claimed_folders() if path not in logs]
    return folders if folders and all(map(is_per_job, folders)) else []
CONFIG_NAME_KEYS = ("run_name", "experiment_name", "exp_name", "wandb.name", "logger.name")
DATASET_KEYS = ("dataset", "dataset_name", "data.name", "task", "task_name")
MODEL_KEYS = ("model.name", "model_name", "arch", "model", "backbone")


def run_name_of(context: PreflightContext) -> tuple[str | None, str]:
    """The run's name and where it came from."""
    if context.launch.guard_options.run_name:
        return context.launch.guard_options.run_name, "--guard-run-name"
    if context.options.job_name:
        source = f"--job-name ({context.options.source('job-name')})"
        swept = named_from_arguments(context.options.job_name, context.launch.script_args)
        if swept != context.options.job_name:  # a loop's runs: one script, one job name, their own arguments
            return swept, f"{source} with the script's arguments"
        return context.options.job_name, source
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
                           f"no run name: sbatch would call it {script!r}; set --job-name{hint} (#SBATCH --job-name "
                           "in the script: a loop's runs are then named from their arguments, --lr 3e-4 adding -lr3e-4)")
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
    shared = ""
    if context.scheduler is not None:
        try:
            active = context.scheduler.active_job_names()
            evidence.append(f"{len(active)} queued/running job name(s) checked on {context.scheduler.name}")
            per_job = per_job_folders(context) if name in active else []
            if per_job:  # a loop of launches of one name, each writing a folder of its own
                shared = f"; a queued or running job has it too, and each writes its own {', '.join(per_job)}"
            elif name in active:
                collisions.append(f"a queued or running job is already called {name!r}")
        except GuardedError as exc:
            warnings.append(f"could not list queued jobs: {exc}")
    else:
        warnings.append("no scheduler: queued and running job names not checked")
    _check_folders(context, name, collisions, warnings, evidence)
    if collisions:
        return CheckResult(NAME, CheckStatus.FAILED,
                           f"run name {name!r} is taken: {'; '.join(collisions)}; pick a new name or pass --guard-restart",
                           tuple(evidence))
    if warnings:
        return CheckResult(
            NAME, CheckStatus.WARNED, f"run name {name!r} follows the pattern{shared}; {'; '.join(warnings)}",
            tuple(evidence)
        )
    free = shared or " and is free"
    return CheckResult(NAME, CheckStatus.PASSED, f"run name {name!r} follows the pattern{free}", tuple(evidence))


def _check_folders(context: PreflightContext, name: str, collisions: list[str], warnings: list[str],
                   evidence: list[str]) -> None:
    """The run's output folders: one a run has written takes the name; one made empty beforehand does not."""
    folders = output_folders(context, name)
    for outcome in timed_stats(folders, context.config.stat_timeout_s, look_inside=True):
        if outcome.empty:  # `mkdir -p runs/NAME` before the launch: no run has written it
            evidence.append(f"output folder {outcome.path} exists and is empty: not a run's")
        elif outcome.exists:
            collisions.append(f"output folder {outcome.path} already exists")
        elif outcome.timed_out:
            warnings.append(f"could not check {outcome.path} (no answer in {context.config.stat_timeout_s:g} s)")
    evidence.extend(f"checked {folder}" for folder in folders)


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


# a script argument that sets one of these names the run: (the part's prefix, the keys it stands for)
SWEPT_KEYS = (("lr", r.LEARNING_RATE), ("bs", (*r.PLAIN_BATCH, *r.PER_DEVICE_BATCH, *r.GLOBAL_BATCH)),
              ("seed", r.SEED), ("wd", r.WEIGHT_DECAY))


def named_from_arguments(name: str, args: tuple[str, ...] | list[str]) -> str:
    """The run name of one launch of a sweep: the job name with what the script's arguments set (`--lr 3e-4`,
    `--lr=3e-4`, `lr=3e-4`: a learning rate, batch size, seed or weight decay) put in it, replacing the name's own
    part for that key (`...-bs64-lr5e-2` with `--lr 1e-3` is `...-bs64-lr1e-3`), else added. The same arguments give
    the same name (a restart); other arguments another run."""
    for prefix, value in _swept_values(args):
        part = f"{prefix}{value}"
        pattern = rf"(?<=-){prefix}[0-9][0-9.]*(?:e-?[0-9]+)?(?=-|$)"
        name = re.sub(pattern, part, name, count=1) if re.search(pattern, name) else f"{name}-{part}"
    return name


def _swept_values(args: tuple[str, ...] | list[str]) -> list[tuple[str, str]]:
    found: dict[str, str] = {}
    words = list(args)
    for index, word in enumerate(words):
        key, equals, value = word.lstrip("-").partition("=")
        if not equals:
            if not word.startswith("-") or index + 1 >= len(words):
                continue
            value = words[index + 1]
        key = key.replace("-", "_").lower()
        for prefix, keys in SWEPT_KEYS:
            number = _number(value)
            if key in keys and number is not None:
                found[prefix] = number
    return list(found.items())


def _number(text: str) -> str | None:
    try:
        value = float(text)
    except ValueError:
        return None
    if value != value or abs(value) == float("inf"):
        return None
    written = text.strip().lower()  # as the user wrote it (5e-2 stays 5e-2) where that is a name's part
    return written if re.fullmatch(r"[0-9]+(\.[0-9]+)?(e-?[0-9]+)?", written) else _short_number(value)
