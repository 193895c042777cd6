"""Site and user configuration (TOML): built-in defaults < site config < user config, merged into the immutable
settings the rest of the code reads (`Config`, `SidecarJobSettings`, `LauncherSettings`).

Which files are read, and how, is core/config_files.py; every key is declared in core/config_schema.py. Keys the
site lists in `locked` (dotted paths, e.g. "checks.mandatory") cannot be changed by a user config.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import Field, dataclass, field, fields, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from guarded_sbatch.core import config_schema as schema
from guarded_sbatch.core.config_files import USER_CONFIG_ENV, read_toml, site_config_paths, user_config_path
from guarded_sbatch.core.config_key import Key, checked
from guarded_sbatch.core.config_schema import DEFAULT_NAME_PATTERN
from guarded_sbatch.core.errors import UsageError
from guarded_sbatch.core.quiet_hours import QuietWindow, parse_quiet_hours
from guarded_sbatch.core.suggest import did_you_mean

__all__ = ["DEFAULT_NAME_PATTERN", "Config", "LauncherSettings", "SidecarJobSettings", "load_config",
           "recorded_sidecar", "setting", "setting_value", "watcher_flags"]

_UNION_KEYS = (("checks", "mandatory"), ("locked",))  # lists a lower site config may add to, never remove from


def _converted(key: Key, value: Any, metadata: Mapping[str, Any], env: Mapping[str, str],
               sources: tuple[Path, ...] = ()) -> Any:
    """A checked config value as its settings field holds it."""
    if key.kind == "path_list":
        return tuple(_expand_path(item, env) for item in value)
    if key.kind == "path":
        return _expand_path(value, env) if value else None
    if key.kind == "quiet_hours":
        return tuple(parse_quiet_hours(entry, sources) for entry in value)
    if isinstance(value, (list, dict)):
        return metadata["container"](value)
    if key.kind == "float":
        return float(value) * metadata["scale"]
    return int(value) if key.kind == "int" else value


def _expand_path(text: str, env: Mapping[str, str]) -> Path:
    """`~` and `$VAR`/`${VAR}` from the environment; no shell is involved."""
    expanded = re.sub(r"\$(\w+)|\$\{(\w+)\}", lambda m: env.get(m.group(1) or m.group(2), m.group(0)), text)
    return Path(expanded).expanduser()


def setting(path: str, *, scale: float = 1.0, container: type = tuple) -> Any:
    """A settings field filled from config key `path` (its default, kind and bounds are the schema's)."""
    metadata = {"key": path, "scale": scale, "container": container}
    default = _converted(schema.KEYS[path], schema.KEYS[path].default, metadata, {})
    if isinstance(default, dict):
        return field(default_factory=lambda: dict(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def setting_value(item: Field[Any], raw: Any, fail: Callable[[str, str], Exception], env: Mapping[str, str] | None = None,
                  sources: tuple[Path, ...] = ()) -> Any:
    """The value of the settings field `item` (made by `setting`) from its key's raw value: checked as the schema
    says, then converted as the field holds it."""
    key = schema.KEYS[item.metadata["key"]]
    return _converted(key, checked(key, raw, fail), item.metadata, env or {}, sources)


@dataclass(frozen=True)
class SidecarJobSettings:
    """The sidecar job's resources and cadence. A launch keeps them in the run's record (`watch`), and every watcher
    of the run reads them there (sidecar/plan.py): the one type from the config file to the loop."""

    partition: str = setting("sidecar.partition")
    account: str = setting("sidecar.account")
    qos: str = setting("sidecar.qos")
    cpus: int = setting("sidecar.cpus")
    mem: str = setting("sidecar.mem")
    time: str = setting("sidecar.time")
    template: str = setting("sidecar.template")
    fast_interval_s: float = setting("sidecar.fast_interval_seconds")  # how often the sidecar reads new metrics
    job_poll_s: float = setting("sidecar.job_poll_seconds")  # how often it may ask the scheduler (≤ 12 an hour)
    full_interval_s: float = setting("check_interval_minutes", scale=60.0)  # between full reports
    unguarded_after_s: float = setting("sidecar.unguarded_after_seconds")  # no judged loss this long: UNGUARDED
    kill_grace_s: float = setting("sidecar.kill_grace_seconds")  # a STOP's TERM to the job's steps, then KILL
    evidence_plot: bool = setting("sidecar.evidence_plot")  # a STOP's evidence includes metrics.png
    mode: str = setting("sidecar.mode")  # "per-job" | "per-user" (one shared monitor job per user and cluster)
    max_runs_per_monitor: int = setting("sidecar.max_runs_per_monitor")
    monitor_time: str = setting("sidecar.monitor_time")  # the shared monitor's --time; it requeues itself before the limit
    monitor_mem: str = setting("sidecar.monitor_mem")


def recorded_sidecar(table: Mapping[str, Any]) -> SidecarJobSettings:
    """The sidecar settings a run record keeps (`dataclasses.asdict` at launch), each checked as the schema says; a
    field missing (an older record) or edited by hand into something invalid is the schema's default."""
    kept: dict[str, Any] = {}
    for item in fields(SidecarJobSettings):
        if item.name not in table:
            continue
        key, value = schema.KEYS[item.metadata["key"]], table[item.name]
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        raw = value / item.metadata["scale"] if key.kind == "float" and number else value
        try:
            checked(key, raw, lambda path, what: ValueError(path))
        except ValueError:
            continue
        kept[item.name] = float(value) if key.kind == "float" else value
    return SidecarJobSettings(**kept)


def watcher_flags() -> list[tuple[str, str, str]]:
    """(flag, field, config key) of each sidecar setting a watcher's command line may set (the schema's `flag`)."""
    return [(schema.KEYS[item.metadata["key"]].flag, item.name, item.metadata["key"])
            for item in fields(SidecarJobSettings) if schema.KEYS[item.metadata["key"]].flag]


@dataclass(frozen=True)
class LauncherSettings:
    signal_margin_s: int = setting("launcher.signal_margin_seconds")  # `--signal=B:USR1@<this>` in launcher jobs
    max_requeues: int = setting("launcher.max_requeues")  # how often such a job requeues itself after checkpointing


@dataclass(frozen=True)
class Config:
    mandatory_checks: frozenset[str] = setting("checks.mandatory", container=frozenset)
    waivable_checks: frozenset[str] = setting("checks.waivable", container=frozenset)  # less the mandatory ones
    run_roots: tuple[Path, ...] = setting("run_roots")
    name_pattern: str = setting("name_pattern")
    forbidden_names: tuple[str, ...] = setting("forbidden_names")
    quiet_hours: tuple[QuietWindow, ...] = setting("quiet_hours")
    sidecar: SidecarJobSettings = SidecarJobSettings()
    launcher: LauncherSettings = LauncherSettings()
    template_dirs: tuple[Path, ...] = setting("template_dirs")
    scheduler: str = setting("scheduler")  # "slurm" | "local" | "auto"
    job_umask: str = setting("job_umask")  # "" (the user's own) or an octal umask every guarded job starts with
    reference_dirs: tuple[str, ...] = setting("preflight.reference_dirs")
    reference_max_depth: int = setting("preflight.reference_max_depth")
    reference_max_age_days: float = setting("preflight.reference_max_age_days")
    stat_timeout_s: float = setting("preflight.stat_timeout_seconds")
    max_workers_on_network_fs: int = setting("preflight.max_workers_on_network_fs")
    locked: frozenset[str] = setting("locked", container=frozenset)
    enabled: bool = setting("enabled")
    notify_urls: tuple[str, ...] = field(default=(), repr=False, metadata={"key": "notify.urls", "scale": 1.0,
                                                                          "container": tuple})  # secrets
    notify_on: frozenset[str] = setting("notify.on", container=frozenset)
    notify_wait_long_s: float = setting("notify.wait_long_minutes", scale=60.0)
    notes_path: Path | None = setting("notes")  # the project notes file; relative to the submit folder
    audit_log: Path | None = setting("audit.log")
    audit_syslog: bool = setting("audit.syslog")
    judge: Mapping[str, float | int | str] = setting("judge", container=dict)  # [judge]: thresholds by name
    sources: tuple[Path, ...] = field(default=(), compare=False)  # files it was loaded from

    def can_waive(self, check: str) -> bool:
        return check not in self.mandatory_checks and check in self.waivable_checks

    def in_quiet_hours(self, moment: datetime) -> QuietWindow | None:
        return next((window for window in self.quiet_hours if window.contains(moment)), None)


def _get(data: Mapping[str, Any], keys: tuple[str, ...]) -> Any:
    node: Any = data
    for key in keys:
        node = node.get(key, []) if isinstance(node, Mapping) else []
    return node


def load_config(
    *, site_path: Path | None = None, user_path: Path | None = None, env: Mapping[str, str] | None = None
) -> Config:
    """Load defaults, then the site config, then the user config; refuse user changes to locked keys."""
    environ = os.environ if env is None else env
    site_paths = [site_path] if site_path is not None else site_config_paths(environ)
    site_path = site_paths[-1] if site_paths else None
    explicit_user = user_path is not None or bool(environ.get(USER_CONFIG_ENV))
    if user_path is None:
        user_path = user_config_path(environ)
    if explicit_user and not user_path.is_file():
        raise UsageError(f"user config {user_path} does not exist; create it or unset {USER_CONFIG_ENV}")
    known = schema.defaults()  # every key of the schema as it is now, with its default
    merged = copy.deepcopy(known)
    sources: list[Path] = []
    site: dict[str, Any] = {}
    for path in site_paths:
        site = read_toml(path)
        _check_known_keys(site, known, path)
        lower = {keys: list(_get(merged, keys)) for keys in _UNION_KEYS} if sources else {}
        _deep_merge(merged, site)
        for keys, values in lower.items():  # the system config keeps what the named one made mandatory or locked
            current = _get(merged, keys)
            if isinstance(current, list):
                current.extend(v for v in values if v not in current)
        sources.append(path)
    if user_path.is_file():
        user = read_toml(user_path)
        _check_known_keys(user, known, user_path)
        for key in (key for key in schema.KEYS.values() if key.site_only):
            if _lookup(user, key.path)[0]:
                raise UsageError(f"{user_path}: '{key.path}' belongs in the site config only; remove it from your config")
        _refuse_locked_changes(user, merged, [str(k) for k in merged.get("locked", [])], user_path, site_path)
        site_urls = list(merged["notify"]["urls"])
        _deep_merge(merged, user)
        if isinstance(merged["notify"].get("urls"), list):
            merged["notify"]["urls"] = site_urls + [u for u in merged["notify"]["urls"] if u not in site_urls]
        sources.append(user_path)
    return _build(merged, sources[-1] if sources else Path("<defaults>"), tuple(sources), environ)


def _check_known_keys(data: Mapping[str, Any], known: Mapping[str, Any], path: Path, prefix: str = "") -> None:
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if key not in known:
            choices = ", ".join(f"{prefix}{k}" for k in known)
            hint = did_you_mean(key, known, prefix=prefix)
            raise UsageError(f"{path}: unknown key '{dotted}'; {hint}known keys here: {choices}")
        if isinstance(known[key], dict):
            if not isinstance(value, dict):
                raise UsageError(f"{path}: '{dotted}' must be a table ([{dotted}]), not {type(value).__name__}")
            if dotted not in schema.OPEN_TABLES:
                _check_known_keys(value, known[key], path, prefix=f"{dotted}.")


def _lookup(data: Mapping[str, Any], dotted: str) -> tuple[bool, Any]:
    node: Any = data
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False, None
        node = node[part]
    return True, node


def _refuse_locked_changes(
    user: Mapping[str, Any], effective: Mapping[str, Any], locked: list[str], user_path: Path, site_path: Path | None
) -> None:
    for key in locked:
        present, wanted = _lookup(user, key)
        if not present:
            continue
        _, current = _lookup(effective, key)
        if wanted != current:
            raise UsageError(
                f"{user_path}: '{key}' is locked by the site config {site_path}; remove it from your config"
            )


def _deep_merge(into: dict[str, Any], layer: Mapping[str, Any]) -> None:
    for key, value in layer.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _deep_merge(into[key], value)
        else:
            into[key] = copy.deepcopy(value)


def _build(data: dict[str, Any], last_file: Path, sources: tuple[Path, ...], env: Mapping[str, str]) -> Config:
    def fail(key: str, what: str) -> UsageError:
        return UsageError(f"{', '.join(map(str, sources)) or 'config'}: '{key}' {what}")

    def fill(cls: type[Any]) -> Any:
        values: dict[str, Any] = {}
        for item in fields(cls):
            if "key" in item.metadata:
                _, raw = _lookup(data, item.metadata["key"])
                values[item.name] = setting_value(item, raw, fail, env, sources)
            elif item.name in ("sidecar", "launcher"):
                values[item.name] = fill(type(item.default))
        return cls(**values)

    config = fill(Config)
    for entry in config.locked:  # a misspelt lock would lock nothing
        if entry not in schema.KEYS and not any(path.startswith(entry + ".") for path in schema.KEYS):
            raise fail("locked", f"names an unknown key {entry!r}; {did_you_mean(entry, schema.KEYS)}"
                       "give a key of the schema")
    return replace(config, waivable_checks=config.waivable_checks - config.mandatory_checks, sources=sources)

