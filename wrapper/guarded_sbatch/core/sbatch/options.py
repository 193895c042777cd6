"""The job's effective sbatch options, with sbatch's precedence: command line > SBATCH_* env vars > #SBATCH lines."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from guarded_sbatch.core.errors import UsageError
from guarded_sbatch.core.sbatch.argv import ParsedOption
from guarded_sbatch.core.sbatch.spec import SBATCH_ENV_VARS, SBATCH_OPTIONS, ArgKind

TIME_FORMATS = "minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS or UNLIMITED"


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
        text = self.get("nodes")
        if not text:
            return 1
        match = re.match(r"^(\d+)", text)  # "2-4" -> at least 2; "2" -> 2
        return max(1, int(match.group(1))) if match else 1

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
    """Merge: `directives` are (where, option) from the script, in order; later lines win over earlier ones."""
    values: dict[str, OptionValue] = {}
    for where, option in directives:
        if option.name == ":":
            break  # heterogeneous job: the first component is the training job
        values[option.name] = OptionValue(option.value, where)
    for variable, name in SBATCH_ENV_VARS.items():
        if variable in env and env[variable] != "":
            kind = SBATCH_OPTIONS[name][1]
            values[name] = OptionValue(None if kind is ArgKind.NONE else env[variable], variable)
    for option in command_line:
        if option.name == ":":
            break
        values[option.name] = OptionValue(option.value, "command line")
    if "time" in values and values["time"].value is not None:
        parse_time_limit(values["time"].value, where=values["time"].source)
    for name, option in values.items():
        text = option.value or ""
        if any(char.isdigit() and not char.isascii() for char in text):
            # '²' or '٣' look like numbers to Python but not to sbatch: it would reject the job later
            raise UsageError(f"--{name}={text[:40]!r} ({option.source}) has a digit sbatch cannot read; "
                             "write the number with 0-9")
    return EffectiveOptions(values)


def _digits(text: str) -> bool:
    """ASCII digits only (str.isdigit also takes '²' and '٣'), and few enough to be a real limit."""
    return text.isascii() and text.isdigit() and len(text) <= 12


def parse_time_limit(text: str, *, where: str = "--time") -> int | None:
    """Slurm's --time formats to seconds; None for UNLIMITED/INFINITE."""
    value = text.strip()
    if value.upper() in ("UNLIMITED", "INFINITE", "-1"):
        return None
    days = 0
    rest = value
    if "-" in value:
        day_text, rest = value.split("-", 1)
        if not _digits(day_text) or not rest:
            raise _bad_time(text, where)
        days = int(day_text)
        parts = rest.split(":")
        if len(parts) > 3 or not all(_digits(p) for p in parts):
            raise _bad_time(text, where)
        hours, minutes, seconds = (int(p) for p in (parts + ["0", "0"])[:3])
    else:
        parts = rest.split(":")
        if not all(_digits(p) for p in parts) or len(parts) > 3:
            raise _bad_time(text, where)
        numbers = [int(p) for p in parts]
        if len(numbers) == 1:
            hours, minutes, seconds = 0, numbers[0], 0
        elif len(numbers) == 2:
            hours, minutes, seconds = 0, numbers[0], numbers[1]
        else:
            hours, minutes, seconds = numbers
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


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
        if _digits(last):
            return int(last)
    return None


def _leading_int(text: str | None) -> int | None:
    if not text:
        return None
    match = re.match(r"^(\d+)", text)
    return int(match.group(1)) if match else None


def _bad_time(text: str, where: str) -> UsageError:
    return UsageError(f"time limit {text!r} ({where}) is not a Slurm time: use {TIME_FORMATS}")
