"""The pre-flight of a W&B sweep (`guarded-sbatch check-sweep sweep.yaml`, and the `wandb sweep` shim).

The sweep config's program, method, command and parameters are read; every combination of the swept
values (grid: the values; random/bayes: each range's ends, and each list's values) becomes the command
line the agent would run (`${interpreter} ${program} ${args}` by default), and that command line goes
through the launch pre-flight like a one-command launch: its config diffed against the reference for the
silent regressors (learning rate swept without batch scaling, workers on NFS, precision, seed missing),
its run name (from --guard-run-name PATTERN with {param} placeholders) checked against the naming rule.
The sweep's W&B project and entity must be known. A failed check blocks, unless waived by name,
exactly as for a launch.
"""

from __future__ import annotations

import itertools
import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from guarded_sbatch.core import door
from guarded_sbatch.core.config import Config
from guarded_sbatch.core.errors import UsageError
from guarded_sbatch.core.waiting import Waiting
from guarded_sbatch.sbatch.argv import split_sbatch_argv
from guarded_sbatch.launch.checks.regressors import LEARNING_RATE
from guarded_sbatch.launch.preflight import PreflightReport, run_preflight
from guarded_sbatch.launch.results import CheckResult, CheckStatus
from guarded_sbatch.launch.runconfig import load_structured_file
from guarded_sbatch.scheduler.interface import Scheduler

METHODS = ("grid", "random", "bayes")
MAX_COMBINATIONS = 64
DEFAULT_COMMAND = ("${env}", "${interpreter}", "${program}", "${args}")
_PLACEHOLDER = re.compile(r"\{([A-Za-z0-9_.\-]+)\}")


@dataclass(frozen=True)
class Sweep:
    """A W&B sweep config: program, method, command, the swept parameters and where its runs go."""

    path: Path
    program: str
    method: str
    parameters: dict[str, list[Any]]  # dotted name -> the values to check (fixed values: one)
    swept: tuple[str, ...]  # the names with more than one value
    command: tuple[str, ...]
    project: str | None
    entity: str | None
    name: str | None


@dataclass
class SweepReport:
    """The sweep's own checks and each combination's pre-flight report."""

    sweep: Sweep
    sweep_checks: list[CheckResult]
    combinations: list[tuple[dict[str, Any], PreflightReport]] = field(default_factory=list)
    total_combinations: int = 0
    waived: tuple[str, ...] = ()

    @property
    def blocked(self) -> bool:
        sweep_failed = any(c.status is CheckStatus.FAILED and c.name not in self.waived for c in self.sweep_checks)
        return sweep_failed or any(report.blocked for _, report in self.combinations)

    def blocking(self) -> list[str]:
        lines = [f"{c.name} (the sweep)" for c in self.sweep_checks
                 if c.status is CheckStatus.FAILED and c.name not in self.waived]
        for index, (combo, report) in enumerate(self.combinations, 1):
            if report.blocked:
                lines.append(f"{', '.join(report.blocking_checks)} in combination {index} ({describe(combo)})")
        return lines

    def to_json(self) -> dict[str, object]:
        return {
            "blocked": self.blocked,
            "sweep": str(self.sweep.path), "program": self.sweep.program, "method": self.sweep.method,
            "project": self.sweep.project, "entity": self.sweep.entity,
            "checks": [c.to_json() for c in self.sweep_checks],
            "combinations_total": self.total_combinations,
            "combinations": [{"parameters": combo, **report.to_json()} for combo, report in self.combinations],
            "blocking": self.blocking(),
        }


def describe(combo: Mapping[str, Any]) -> str:
    """A combination for people: `batch_size=64, lr=0.01`."""
    return ", ".join(f"{key}={value}" for key, value in combo.items()) or "no parameters"


def load_sweep(path: Path, env: Mapping[str, str] | None = None) -> Sweep:
    """Read and check a sweep config (YAML); each parameter becomes the values a run may see."""
    environ = os.environ if env is None else env
    data = load_structured_file(path)
    if not isinstance(data, Mapping):
        raise UsageError(f"sweep config {path} is not a mapping (program, method, parameters)")
    method = str(data.get("method") or "")
    if method not in METHODS:
        raise UsageError(f"sweep config {path}: method {method or '(missing)'!r} is not one of {', '.join(METHODS)}")
    program = data.get("program")
    command = data.get("command") or list(DEFAULT_COMMAND)
    if not isinstance(command, list) or not all(isinstance(w, (str, int, float)) for w in command):
        raise UsageError(f"sweep config {path}: `command` must be a list of words")
    if not program and any("${program}" in str(w) for w in command):
        raise UsageError(f"sweep config {path}: no `program` (the training script the agent runs)")
    raw = data.get("parameters")
    if not isinstance(raw, Mapping) or not raw:
        raise UsageError(f"sweep config {path}: no `parameters` to sweep")
    parameters = _parameters(raw, "", path, method)
    return Sweep(
        path=path, program=str(program or ""), method=method, parameters=parameters,
        swept=tuple(k for k, v in parameters.items() if len(v) > 1), command=tuple(str(w) for w in command),
        # `wandb sweep --project/--entity` (passed on by the shim) win over the config, then W&B's variables
        project=str(environ.get("GUARDED_SBATCH_SWEEP_PROJECT") or data.get("project")
                    or environ.get("WANDB_PROJECT") or "") or None,
        entity=str(environ.get("GUARDED_SBATCH_SWEEP_ENTITY") or data.get("entity")
                   or environ.get("WANDB_ENTITY") or "") or None,
        name=str(data["name"]) if data.get("name") else None,
    )


def _parameters(raw: Mapping[str, Any], prefix: str, path: Path, method: str) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for key, spec in raw.items():
        name = f"{prefix}{key}"
        if not isinstance(spec, Mapping):
            raise UsageError(f"sweep config {path}: parameter {name!r} must be a mapping (value, values, min/max)")
        if isinstance(spec.get("parameters"), Mapping):  # nested: optimizer.parameters.lr -> optimizer.lr
            out.update(_parameters(spec["parameters"], f"{name}.", path, method))
        elif "value" in spec:
            out[name] = [spec["value"]]
        elif isinstance(spec.get("values"), list) and spec["values"]:
            out[name] = list(spec["values"])
        elif "min" in spec and "max" in spec:
            if method == "grid":
                raise UsageError(f"sweep config {path}: a grid search needs `values` for {name!r}, not a min/max range")
            out[name] = [spec["min"], spec["max"]]  # the ends of the range: the extremes a run will see
        elif "distribution" in spec and ("mu" in spec or "sigma" in spec):
            raise UsageError(f"sweep config {path}: parameter {name!r} has an unbounded distribution; give min/max")
        else:
            raise UsageError(f"sweep config {path}: parameter {name!r} has no value, values or min/max")
    return out


def combinations(sweep: Sweep, limit: int = MAX_COMBINATIONS) -> tuple[list[dict[str, Any]], int]:
    """The first `limit` combinations of the swept values, and how many there are in all."""
    names = list(sweep.parameters)
    total = 1
    for values in sweep.parameters.values():
        total *= len(values)
    combos = [dict(zip(names, values)) for values in itertools.islice(
        itertools.product(*(sweep.parameters[n] for n in names)), limit)]
    return combos, total


def command_words(sweep: Sweep, combo: Mapping[str, Any], interpreter: str = "python") -> list[str]:
    """The command line the agent runs for one combination (W&B's macros expanded)."""
    def text(value: Any) -> str:
        return str(value).lower() if isinstance(value, bool) else str(value)

    words: list[str] = []
    for word in sweep.command:
        if word == "${env}":
            continue
        if word == "${args}" or word == "${args_no_boolean_flags}":
            words.extend(f"--{k}={text(v)}" for k, v in combo.items())
        elif word == "${args_no_hyphens}":
            words.extend(f"{k}={text(v)}" for k, v in combo.items())
        elif word == "${args_json}" or word == "${args_json_file}":
            raise UsageError("this sweep passes its parameters as JSON (${args_json}); use ${args} to check it")
        else:
            words.append(word.replace("${interpreter}", interpreter).replace("${program}", sweep.program))
    return words


def render_run_name(pattern: str, combo: Mapping[str, Any]) -> str:
    """'mlp-bs{batch_size}-lr{lr}' -> 'mlp-bs256-lr0.01'; an unknown placeholder is a usage error."""
    def value(match: re.Match[str]) -> str:
        key = match.group(1)
        short = {k.rsplit(".", 1)[-1]: v for k, v in combo.items()}
        if key in combo:
            return str(combo[key])
        if key in short:
            return str(short[key])
        raise UsageError(f"--guard-run-name {pattern!r}: {{{key}}} is not a sweep parameter ({', '.join(combo)})")
    return _PLACEHOLDER.sub(value, pattern)


def check_sweep(path: Path, guard_words: list[str], config: Config, scheduler: Scheduler | None,
                *, cwd: Path | None = None) -> SweepReport:
    """Each combination's command line through the launch pre-flight (its learning rates judged as a sweep's)."""
    base = cwd or Path.cwd()
    sweep = load_sweep(path if path.is_absolute() else base / path)
    launch = split_sbatch_argv([*guard_words, "sweep.sh"])  # validates the guard options and waivers
    guard = launch.guard_options
    report = SweepReport(sweep, [_identity(sweep)], waived=tuple(w.check for w in guard.waivers))
    combos, report.total_combinations = combinations(sweep)
    pattern = guard.run_name
    words = _without_run_name(guard_words)  # each combination gets its own name from the pattern
    swept_lr = _swept_learning_rates(sweep)
    with door.private_temp_dir("guarded-sweep-") as folder, \
            Waiting(f"the pre-flight of {len(combos)} combination(s)") as told:
        for index, combo in enumerate(combos, 1):
            script = Path(folder) / f"combination-{index}.sh"
            door.write_new(script, f"#!/bin/bash\nexec {shlex.join(command_words(sweep, combo))}\n", 0o600)
            name_words = [f"--guard-run-name={render_run_name(pattern, combo)}"] if pattern else []
            combo_launch = split_sbatch_argv([*words, *name_words, str(script)])
            report.combinations.append((combo, run_preflight(combo_launch, config, scheduler, cwd=base,
                                                             swept_lr=swept_lr)))
            told.detail = f"{index} of {len(combos)} checked"
    return report


def _swept_learning_rates(sweep: Sweep) -> tuple[float, ...]:
    """The learning rates a sweep searches (every batch size of a grid gets all of them): an lr x batch-size grid
    is judged by whether these reach the rescaled LR, not combination by combination."""
    for name, values in sweep.parameters.items():
        if name.rsplit(".", 1)[-1].replace("-", "_").lower() in LEARNING_RATE and len(values) > 1:
            numbers = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0]
            return tuple(numbers) if len(numbers) > 1 else ()
    return ()


def _without_run_name(words: list[str]) -> list[str]:
    out: list[str] = []
    skip = False
    for word in words:
        if skip:
            skip = False
        elif word == "--guard-run-name":
            skip = True
        elif not word.startswith("--guard-run-name="):
            out.append(word)
    return out


def _identity(sweep: Sweep) -> CheckResult:
    """Where the sweep's runs will be recorded: the W&B project (and entity) must be known."""
    evidence = (f"project: {sweep.project or '(not set)'}", f"entity: {sweep.entity or '(your default entity)'}",
                f"sweep name: {sweep.name or '(none)'}",
                f"program: {sweep.program}, method: {sweep.method}, swept: {', '.join(sweep.swept) or 'nothing'}")
    if not sweep.project:
        return CheckResult("monitoring", CheckStatus.FAILED,
                           "the sweep names no W&B project: its runs would land in your default project; "
                           "set `project:` in the sweep config (or WANDB_PROJECT)", evidence)
    if not sweep.swept:
        return CheckResult("monitoring", CheckStatus.WARNED, f"W&B {sweep.entity or ''}/{sweep.project}: but nothing "
                           "is swept (every parameter has one value)", evidence)
    where = f"{sweep.entity}/{sweep.project}" if sweep.entity else f"{sweep.project} (default entity)"
    return CheckResult("monitoring", CheckStatus.PASSED, f"the sweep's runs go to W&B {where}", evidence)
