"""The job's effective sbatch options, with sbatch's precedence: command line > SBATCH_* env vars > #SBATCH lines."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from guarded_sbatch.core.errors import UsageError
from guarded_sbatch.sbatch.argv import ParsedOption
from guarded_sbatch.sbatch.spec import (
    POSITIVE_INT_OPTIONS,
    SBATCH_ENV_VARS,
    SBATCH_OPTIONS,
    ArgKind,
    canonical_name,
)
from guarded_sbatch.sbatch.values import TIME_FORMATS, parse_node_count, parse_positive_int, strtol_prefix
from guarded_sbatch.sbatch.values import parse_time_limit as _parse_time_limit

__all__ = ["TIME_FORMATS", "EffectiveOptions", "OptionValue", "effective_options", "parse_time_limit"]


@dataclass(frozen=True)
class OptionValue:
    value: str | None
    source: str  # "command line", "SBATCH_TIMELIMIT", "train.sh line 4"


@dataclass(frozen=True)
class EffectiveOptions:
    values: dict[str, OptionValue]

    def get(self, name: str) -> str | None:
        item = self.values.get(name)
        return item.value if item else None

    def source(self, name: str) -> str | None:
        item = self.values.get(name)
        return item.source if item else None

    def has(self, name: str) -> bool:
        return name in self.values

    @property
    def time_limit_s(self) -> int | None:
        """Seconds, or None when unlimited or not given (the partition's default applies)."""
        text = self.get("time")
        return None if text is None else parse_time_limit(text)

    @property
    def nodes(self) -> int:
        """The minimum node count ("2-4" -> 2, "1k" -> 1024), at least 1."""
        text = self.get("nodes")
        if text is None:
            return 1
        return max(1, parse_node_count(text, where=self.source("nodes") or "--nodes")[0])

    @property
    def tasks_per_node(self) -> int:
        per_node = _leading_int(self.get("ntasks-per-node"))
        if per_node:
            return per_node
        total = _leading_int(self.get("ntasks"))
        if total:
            return max(1, total // self.nodes)
        return 1

    @property
    def gpus_per_node(self) -> int | None:
        for name in ("gpus-per-node", "gres"):
            text = self.get(name)
            if text:
                count = gpu_count(text, gres=name == "gres")
                if count is not None:
                    return count
        total = self.get("gpus")
        if total:
            count = gpu_count(total)
            if count is not None:
                return max(1, count // self.nodes)
        per_task = self.get("gpus-per-task")
        if per_task:
            count = gpu_count(per_task)
            if count is not None:
                return count * self.tasks_per_node
        return None

    @property
    def job_name(self) -> str | None:
        return self.get("job-name")


def effective_options(
    command_line: Sequence[ParsedOption],
    directives: Sequence[tuple[str, ParsedOption]],
    env: Mapping[str, str],
) -> EffectiveOptions:
    """Merge as sbatch does: #SBATCH lines (in order), then SBATCH_* variables, then the command line; a later
    setting wins. Every value is checked where it is set, as sbatch does (a bad SBATCH_TIMELIMIT is refused even
    when --time overrides it). `directives` are (where, option); a heterogeneous job's first component counts."""
    values: dict[str, OptionValue] = {}
    for where, option in directives:
        if option.name == ":":
            break
        _set(values, option.name, option.value, where)
    for variable, name in SBATCH_ENV_VARS.items():
        if variable in env:
            _set_from_env(values, name, env[variable], variable)
    for option in command_line:
        if option.name == ":":
            break
        _set(values, option.name, option.value, "command line")
    if "quiet" in values and "verbose" in values and values["quiet"].source == "command line":
        raise UsageError("--quiet (-Q) and --verbose (-v) (or SBATCH_DEBUG) together: sbatch refuses both; drop one")
    return EffectiveOptions(values)


def parse_time_limit(text: str, *, where: str = "--time") -> int | None:
    """Slurm's --time grammar (sbatch_values.parse_time_limit): seconds as Slurm stores them; None = no limit."""
    return _parse_time_limit(text, where=where)


def _set(values: dict[str, OptionValue], name: str, value: str | None, where: str) -> None:
    name = canonical_name(name)
    if value is not None:
        value = _checked(name, value, where)
    values[name] = OptionValue(value, where)


def _set_from_env(values: dict[str, OptionValue], name: str, text: str, variable: str) -> None:
    """sbatch's rules for options given by variables: a flag is set by "", "yes" or a non-zero number and
    cleared by anything else; an optional value that is empty counts as none."""
    kind = SBATCH_OPTIONS[name][1]
    if kind is ArgKind.NONE:
        number, rest = strtol_prefix(text)
        if text == "" or text.lower() == "yes" or (number and not rest):
            values[canonical_name(name)] = OptionValue(None, variable)
        else:
            values.pop(canonical_name(name), None)
        return
    _set(values, name, None if (kind is ArgKind.OPTIONAL and text == "") else text, variable)


def _checked(name: str, value: str, where: str) -> str:
    """Check a value the way sbatch does before it keeps it; returns the value sbatch keeps."""
    if name in ("time", "time-min"):
        _parse_time_limit(value, where=f"--{name}, {where}")
    elif name == "nodes":
        parse_node_count(value, where=where)
    elif name in POSITIVE_INT_OPTIONS:
        parse_positive_int(value, name, where=where)
    elif name == "no-kill" and value.lower() not in ("set", "off", "no"):
        raise UsageError(f"--no-kill={value!r} ({where}): sbatch takes only set, off or no")
    elif name in ("output", "error", "input") and value.lower() == "none":
        return "/dev/null"
    return value


def format_duration(seconds: float) -> str:
    total = int(round(seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    clock = f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}" if days else f"{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{clock} ({seconds / 3600:.1f} h)" if total >= 360 else f"{clock} ({total} s)"


def gpu_count(text: str, *, gres: bool = False) -> int | None:
    """--gpus* values '4', 'a100:4' -> 4; with gres=True: 'gpu:a100:4,tmpdisk:10', 'gres/gpu:2', 'gpu' -> count."""
    for item in text.split(","):
        parts = item.removeprefix("gres/").split(":")
        if gres and parts[0] != "gpu":
            continue
        if gres and len(parts) == 1:
            return 1
        last = parts[-1].split("(")[0]
        if re.fullmatch(r"[0-9]{1,9}", last):  # ASCII digits only: int() would take '²' or 5000 digits
            return int(last)
    return None


def _leading_int(text: str | None) -> int | None:
    if not text:
        return None
    number, _ = strtol_prefix(text)
    return number if number and number > 0 else None
