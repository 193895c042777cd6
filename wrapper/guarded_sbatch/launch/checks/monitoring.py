"""Check 4: which tracker the run reports to, and whether its project / entity / name / tags are set."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from guarded_sbatch.launch.context import PreflightContext
from guarded_sbatch.launch.fsinfo import timed_stats
from guarded_sbatch.launch.results import CheckName, CheckResult, CheckStatus

NAME = CheckName.MONITORING.value
MAX_SOURCE_BYTES = 1024 * 1024
IMPORT = r"^\s*(?:import|from)\s+{}\b"
TENSORBOARD_USE = r"^\s*(?:import|from)\s+(?:tensorboard|tensorboardX|torch\.utils\.tensorboard)\b|EventFileWriter"


@dataclass
class Tracker:
    kind: str  # "wandb" | "neptune" | "mlflow" | "tensorboard"
    because: list[str] = field(default_factory=list)
    settings: dict[str, str] = field(default_factory=dict)  # project, entity, name, tags, group, experiment, log_dir


def program_source(context: PreflightContext) -> tuple[Path | None, str]:
    launcher = context.launcher
    if launcher is None:
        return None, ""
    if launcher.is_module:
        path = context.workdir / (launcher.program.replace(".", "/") + ".py")
    else:
        path = context.resolve(launcher.program)
    outcome = timed_stats([path], context.config.stat_timeout_s)[0]
    if not outcome.exists or outcome.is_dir:
        return path, ""
    try:
        with path.open("rb") as handle:
            return path, handle.read(MAX_SOURCE_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return path, ""


@dataclass(frozen=True)
class _RunSigns:
    """What the run shows about its trackers: its environment, program source, config and arguments."""

    context: PreflightContext
    source: str  # the program's text ("" when unknown)
    where: str  # the program's file name, for the reasons
    values: dict[str, object]  # the run config's flattened values
    args: str  # the program's arguments
    report_to: str  # the config's report_to / logger / tracker values and --log_with

    def imports(self, module: str) -> bool:
        return re.search(IMPORT.format(module), self.source, re.MULTILINE) is not None


def detect_trackers(context: PreflightContext) -> list[Tracker]:
    source_path, source = program_source(context)
    values = context.intended.values if context.intended else {}
    args = " ".join(w.text for w in context.launcher.program_args) if context.launcher else ""
    report_to = " ".join(
        str(v) for k, v in values.items() if k.rsplit(".", 1)[-1] in ("report_to", "logger", "loggers", "tracker", "log_with")
    )
    report_to += " " + (context.launcher.option("log_with") or "" if context.launcher else "")
    where = f"{source_path.name}" if source_path else "the program"
    signs = _RunSigns(context, source, where, values, args, report_to.lower())
    found = (detect(signs) for detect in (_wandb, _neptune, _mlflow, _tensorboard))
    return [tracker for tracker in found if tracker is not None]


def _wandb(signs: _RunSigns) -> Tracker | None:
    wandb = Tracker("wandb")
    if signs.context.env.get("WANDB_API_KEY"):
        wandb.because.append("WANDB_API_KEY is set")
    if signs.imports("wandb") or "WandbLogger" in signs.source:
        wandb.because.append(f"{signs.where} imports wandb")
    if "wandb" in signs.report_to or any(k.startswith("wandb.") or k.startswith("wandb_") for k in signs.values):
        wandb.because.append("the config reports to wandb")
    if not wandb.because:
        return None
    wandb.settings = _wandb_settings(signs.values, signs.source, signs.context)
    return wandb


def _neptune(signs: _RunSigns) -> Tracker | None:
    env = signs.context.env
    neptune = Tracker("neptune")
    if env.get("NEPTUNE_API_TOKEN"):
        neptune.because.append("NEPTUNE_API_TOKEN is set")
    if signs.imports("neptune"):
        neptune.because.append(f"{signs.where} imports neptune")
    if not neptune.because:
        return None
    neptune.settings = {k: v for k, v in {"project": env.get("NEPTUNE_PROJECT", "")}.items() if v}
    return neptune


def _mlflow(signs: _RunSigns) -> Tracker | None:
    env = signs.context.env
    mlflow = Tracker("mlflow")
    if env.get("MLFLOW_TRACKING_URI"):
        mlflow.because.append("MLFLOW_TRACKING_URI is set")
    if signs.imports("mlflow") or "mlflow" in signs.report_to:
        mlflow.because.append(f"{signs.where} uses mlflow")
    if not mlflow.because:
        return None
    experiment = env.get("MLFLOW_EXPERIMENT_NAME") or _call_argument(
        signs.source, r"set_experiment\(\s*(?:experiment_name\s*=\s*)?"
    )
    mlflow.settings = {
        k: v for k, v in {"tracking_uri": env.get("MLFLOW_TRACKING_URI", ""), "experiment": experiment or ""}.items() if v
    }
    return mlflow


def _tensorboard(signs: _RunSigns) -> Tracker | None:
    context, source = signs.context, signs.source
    tensorboard = Tracker("tensorboard")
    folders = [context.workdir / "runs", context.workdir / "lightning_logs"]
    for outcome in timed_stats(folders, context.config.stat_timeout_s):
        if outcome.exists and outcome.is_dir:
            tensorboard.because.append(f"{outcome.path} exists")
            tensorboard.settings.setdefault("log_dir", str(outcome.path))
    if (
        "SummaryWriter" in source
        or "TensorBoardLogger" in source
        or "tensorboard" in signs.report_to
        or "tensorboard" in signs.args
        or re.search(TENSORBOARD_USE, source, re.MULTILINE)
    ):
        tensorboard.because.append(f"{signs.where} writes TensorBoard events")
    return tensorboard if tensorboard.because else None


def _wandb_settings(values: dict[str, object], source: str, context: PreflightContext) -> dict[str, str]:
    environ = context.env
    settings: dict[str, str] = {}
    for key, variable, config_keys in (
        ("project", "WANDB_PROJECT", ("wandb.project", "wandb_project", "logger.project")),
        ("entity", "WANDB_ENTITY", ("wandb.entity", "wandb_entity", "logger.entity")),
        ("name", "WANDB_NAME", ("wandb.name", "wandb_name", "run_name", "logger.name")),
        ("tags", "WANDB_TAGS", ("wandb.tags", "wandb_tags", "logger.tags")),
        ("group", "WANDB_RUN_GROUP", ("wandb.group", "wandb_group", "logger.group")),
    ):
        value = environ.get(variable, "")
        if not value:
            value = next((str(values[k]) for k in config_keys if values.get(k) not in (None, "")), "")
        if not value:
            value = _call_argument(source, rf"wandb\.init\([^)]*?\b{key}\s*=\s*") or ""
        if not value and re.search(rf"wandb\.init\([^)]*?\b{key}\s*=", source, re.DOTALL):
            value = "(set in code)"
        if value:
            settings[key] = value
    if environ.get("WANDB_MODE"):
        settings["mode"] = environ["WANDB_MODE"]
    return settings


def _call_argument(source: str, prefix: str) -> str | None:
    match = re.search(prefix + r"[\"']([^\"']+)[\"']", source, re.DOTALL)
    return match.group(1) if match else None


def check_monitoring(context: PreflightContext) -> CheckResult:
    trackers = detect_trackers(context)
    if not trackers:
        # The job's own stdout/stderr is always there and the sidecar reads the common trainers' log lines.
        stdout = context.options.get("output") or "slurm-%j.out"
        return CheckResult(NAME, CheckStatus.PASSED,
                           f"no tracker found: the sidecar watches the job's own log ({stdout}); it can judge only "
                           "what the trainer prints there (loss / eval lines)",
                           ("not found: WANDB_API_KEY / import wandb, NEPTUNE_API_TOKEN, MLFLOW_TRACKING_URI / mlflow, "
                            "TensorBoard writers, runs/ or lightning_logs/",),
                           {"trackers": [{"kind": "stdout", "settings": {"output": stdout}}]})  # fmt: skip
    evidence = [
        f"{t.kind}: {'; '.join(t.because)}" + (f" — {', '.join(f'{k}={v}' for k, v in t.settings.items())}" if t.settings else "")
        for t in trackers
    ]
    main = trackers[0]
    details: dict[str, object] = {"trackers": [{"kind": t.kind, "settings": t.settings} for t in trackers]}
    if main.kind == "wandb":
        if main.settings.get("mode") == "disabled":
            return CheckResult(
                NAME,
                CheckStatus.FAILED,
                "WANDB_MODE=disabled: the run logs nothing; unset it or use offline",
                tuple(evidence),
                details,
            )
        if "project" not in main.settings:
            return CheckResult(
                NAME,
                CheckStatus.FAILED,
                "W&B project not set: set WANDB_PROJECT or wandb.project in the config",
                tuple(evidence),
                details,
            )
        missing = [key for key in ("entity", "name") if key not in main.settings]
        extras = [key for key in ("tags", "group") if key not in main.settings]
        summary = f"W&B project {main.settings['project']}" + (
            f", entity {main.settings['entity']}" if "entity" in main.settings else ""
        )
        if missing:
            return CheckResult(NAME, CheckStatus.WARNED,
                               f"{summary}; not set: {', '.join(missing)} (W&B picks a default / random one)"
                               + (f"; no {' or '.join(extras)}" if extras else ""), tuple(evidence), details)  # fmt: skip
        return CheckResult(
            NAME,
            CheckStatus.PASSED,
            f"{summary}, name {main.settings['name']}" + (f"; no {' or '.join(extras)}" if extras else ""),
            tuple(evidence),
            details,
        )
    if main.kind == "mlflow" and "experiment" not in main.settings:
        return CheckResult(
            NAME, CheckStatus.WARNED, "MLflow without an experiment name: set MLFLOW_EXPERIMENT_NAME", tuple(evidence), details
        )
    return CheckResult(NAME, CheckStatus.PASSED, f"tracker {main.kind} found", tuple(evidence), details)
