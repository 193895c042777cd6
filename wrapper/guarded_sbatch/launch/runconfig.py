"""Training-run configs (YAML / JSON / TOML, Hydra-style defaults and overrides) as flat dotted keys."""

from __future__ import annotations

import json
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from guarded_sbatch.core import door
from guarded_sbatch.core.fsutil import TooLargeError, read_text_bounded
from guarded_sbatch.launch.bounded_yaml import YamlTooLargeError, safe_load_bounded
from guarded_sbatch.core.errors import UsageError

CONFIG_SUFFIXES = (".yaml", ".yml", ".json", ".toml")
MAX_CONFIG_BYTES = 2 * 1024 * 1024


@dataclass(frozen=True)
class RunConfig:
    path: Path | None
    values: dict[str, Any]  # flat: "optimizer.lr" -> 0.0003
    files: tuple[Path, ...] = ()  # every file that went into it (Hydra defaults included)
    overrides: dict[str, Any] = field(default_factory=dict)  # from the command line

    def find(self, aliases: tuple[str, ...]) -> tuple[str, Any] | None:
        """The first key whose last part(s) match an alias ('lr' matches 'optimizer.lr'); overrides first."""
        for alias in aliases:
            for key in sorted(self.values, key=lambda k: (k not in self.overrides, k.count("."), k)):
                normalized = key.replace("-", "_").lower()
                if normalized == alias or normalized.endswith("." + alias):
                    return key, self.values[key]
        return None


MAX_NESTING = 100


def _bracket_depth(text: str) -> int:
    """The deepest [ / { nesting (strings not excluded: an over-estimate is fine). A YAML parser takes
    seconds on a few thousand open brackets; a real config never nests more than a dozen levels."""
    depth = deepest = 0
    for char in text:
        if char in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_NESTING:
                    break
        elif char in "]}" and depth:
            depth -= 1
    return deepest


def load_structured_file(path: Path) -> Any:
    """Parse one YAML / JSON / TOML file; UsageError naming the file (and line) when it is malformed."""
    text = _read_config_text(path)
    if _bracket_depth(text) > MAX_NESTING:
        raise UsageError(f"config {path} is nested more than {MAX_NESTING} levels deep; that is not a training config")
    suffix = path.suffix.lower()
    try:
        if suffix == ".json":
            return json.loads(text)
        if suffix == ".toml":
            return tomllib.loads(text)
        return safe_load_bounded(text)
    except YamlTooLargeError as exc:
        raise UsageError(f"config {path} is not read: {exc}; that is not a training config") from None
    except RecursionError:
        raise UsageError(f"config {path} is nested too deeply to read; flatten it") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"config {path} is not valid JSON: {exc.msg} at line {exc.lineno}; fix that line") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"config {path} is not valid TOML: {exc}; fix that line") from None
    except Exception as exc:  # noqa: BLE001 - yaml.YAMLError: imported lazily, so caught by its message
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UsageError(f"config {path} is not valid YAML{where}: {problem}; fix that line") from None


def _read_config_text(path: Path) -> str:
    """The config's text; UsageError for a file too big to be a config, not UTF-8, or unreadable."""
    try:
        return read_text_bounded(path, MAX_CONFIG_BYTES)  # a FIFO, /dev/zero or an endless file: refused, named
    except TooLargeError as exc:
        raise UsageError(f"config {path} is {exc.size} bytes; that is not a training config") from None
    except UnicodeDecodeError:
        raise UsageError(f"config {path} is not UTF-8 text; is it the right file?") from None
    except OSError as exc:
        raise UsageError(f"cannot read config {path}: {exc.strerror or exc}") from None


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    if isinstance(data, Mapping):
        for key, value in data.items():
            dotted = f"{prefix}.{key}" if prefix else str(key)
            if isinstance(value, Mapping) and value:
                flat.update(flatten(value, dotted))
            else:
                flat[dotted] = value
    elif prefix:
        flat[prefix] = data
    return flat


def load_run_config(path: Path, overrides: Mapping[str, str] | None = None) -> RunConfig:
    """Load a run config, compose Hydra `defaults` found beside it, then apply command-line overrides."""
    data = load_structured_file(path)
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise UsageError(f"config {path} holds a {type(data).__name__}, not a mapping of settings")
    files = [path]
    composed = _compose_hydra_defaults(dict(data), path.parent, files)
    values = flatten(composed)
    parsed_overrides = {key: parse_scalar(value) for key, value in (overrides or {}).items()}
    for key, value in parsed_overrides.items():
        existing = [k for k in values if k == key or k.endswith("." + key)]
        values[existing[0] if len(existing) == 1 else key] = value
    return RunConfig(path, values, tuple(files), parsed_overrides)


def config_from_overrides(overrides: Mapping[str, str]) -> RunConfig:
    parsed = {key: parse_scalar(value) for key, value in overrides.items()}
    return RunConfig(None, dict(parsed), (), parsed)


def _compose_hydra_defaults(data: dict[str, Any], config_dir: Path, files: list[Path]) -> dict[str, Any]:
    defaults = data.pop("defaults", None)
    if not isinstance(defaults, list):
        return data
    composed: dict[str, Any] = {}
    for entry in defaults:
        if entry == "_self_":
            composed = _merge(composed, data)
            continue
        if isinstance(entry, Mapping) and len(entry) == 1:
            group, option = next(iter(entry.items()))
            group = str(group).lstrip("+").split("@")[0].removeprefix("override ").strip()
            candidate = _find_config(config_dir / group, str(option))
            if candidate is not None:
                files.append(candidate)
                loaded = load_structured_file(candidate) or {}
                if isinstance(loaded, Mapping):
                    nested = _compose_hydra_defaults(dict(loaded), candidate.parent, files)
                    composed = _merge(composed, _nest(group, nested))
        elif isinstance(entry, str):
            candidate = _find_config(config_dir, entry)
            if candidate is not None:
                files.append(candidate)
                loaded = load_structured_file(candidate) or {}
                if isinstance(loaded, Mapping):
                    composed = _merge(composed, _compose_hydra_defaults(dict(loaded), candidate.parent, files))
    if "_self_" not in defaults:
        composed = _merge(composed, data)
    return composed


def _find_config(folder: Path, name: str) -> Path | None:
    for suffix in ("", ".yaml", ".yml"):
        candidate = folder / f"{name}{suffix}"
        if candidate.is_file():
            return candidate
    return None


def _nest(group: str, value: dict[str, Any]) -> dict[str, Any]:
    for part in reversed(group.split("/")):
        value = {part: value}
    return value


def _merge(base: dict[str, Any], layer: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in layer.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def parse_scalar(text: str) -> Any:
    """Command-line values as the config would hold them: numbers, booleans, null, lists; else the string."""
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("null", "none", "~"):
        return None
    if re.fullmatch(r"[+-]?\d+", text.strip()):
        return int(text)
    try:
        return float(text)
    except ValueError:
        pass
    if text.startswith("[") and text.endswith("]"):
        return [parse_scalar(item.strip()) for item in text[1:-1].split(",") if item.strip()]
    return text


def as_number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def not_a_file(path: Path) -> str:
    """Why a config path is no file to read: missing, or a FIFO / device / socket standing there."""
    try:
        return f"is {door.kind_of(os.stat(path).st_mode)}, not a config file"
    except OSError:
        return "does not exist"
