"""Site and user configuration (TOML): built-in defaults < site config < user config.

The site config's path comes from GUARDED_SBATCH_SITE_CONFIG (a modulefile sets it). The user config is
GUARDED_SBATCH_USER_CONFIG, else $XDG_CONFIG_HOME/guarded-sbatch/config.toml (~/.config/...). Keys the site
lists in `locked` (dotted paths, e.g. "checks.mandatory") cannot be changed by a user config.
"""

from __future__ import annotations

import copy
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import Field, dataclass, field, fields, replace
from datetime import datetime, time
from pathlib import Path
from typing import Any

from guarded_sbatch.core import config_schema as schema
from guarded_sbatch.core.config_schema import (
    DEFAULT_FORBIDDEN_NAMES,
    DEFAULT_NAME_PATTERN,
    MAX_NUMBER,
    NOTIFY_EVENTS,
    Key,
    checked,
)
from guarded_sbatch.core import door
from guarded_sbatch.core.errors import UsageError
from guarded_sbatch.core.suggest import did_you_mean

__all__ = ["DEFAULT_FORBIDDEN_NAMES", "DEFAULT_NAME_PATTERN", "MAX_NUMBER", "NOTIFY_EVENTS", "Config",
           "LauncherSettings", "QuietWindow", "SidecarJobSettings", "load_config", "parse_quiet_hours", "read_toml",
           "recorded_sidecar", "watcher_flags"]

SITE_CONFIG_ENV = "GUARDED_SBATCH_SITE_CONFIG"
# The admins' site config at a fixed system path: always read when it is there, whatever the environment says
# (unsetting GUARDED_SBATCH_SITE_CONFIG drops nothing); a config the variable names is merged below it.
SYSTEM_SITE_CONFIG = Path("/etc/guarded-sbatch/site.toml")
_UNION_KEYS = (("checks", "mandatory"), ("locked",))  # lists a lower site config may add to, never remove from
USER_CONFIG_ENV = "GUARDED_SBATCH_USER_CONFIG"


WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
QUIET_ENTRY = re.compile(r"^(?:(?P<days>[A-Za-z,\-]+)\s+)?(?P<start>\d{1,2}:\d{2})\s*-\s*(?P<end>\d{1,2}:\d{2})$")


@dataclass(frozen=True)
class QuietWindow:
    """A daily window (may cross midnight) on some weekdays (0 = Monday); the weekday is that of its start."""

    start: time
    end: time  # time(0, 0) with end_of_day=True stands for 24:00
    weekdays: frozenset[int]
    text: str
    end_of_day: bool = False

    def contains(self, moment: datetime) -> bool:
        minute = moment.hour * 60 + moment.minute
        start = self.start.hour * 60 + self.start.minute
        end = 24 * 60 if self.end_of_day else self.end.hour * 60 + self.end.minute
        if start < end:
            return moment.weekday() in self.weekdays and start <= minute < end
        # crosses midnight: the late part belongs to today, the early part to yesterday's window
        if minute >= start:
            return moment.weekday() in self.weekdays
        return minute < end and (moment.weekday() - 1) % 7 in self.weekdays


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



def user_config_path(env: Mapping[str, str]) -> Path:
    if env.get(USER_CONFIG_ENV):
        return Path(env[USER_CONFIG_ENV]).expanduser()
    base = Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else Path.home() / ".config"
    return base / "guarded-sbatch" / "config.toml"


def site_config_paths(environ: Mapping[str, str]) -> list[Path]:
    """The site configs to read, lowest first: the one $GUARDED_SBATCH_SITE_CONFIG names, then the system one
    (SYSTEM_SITE_CONFIG), which no environment can unset or override downward."""
    paths: list[Path] = []
    if environ.get(SITE_CONFIG_ENV):
        named = Path(environ[SITE_CONFIG_ENV]).expanduser()
        if not named.is_file():
            raise UsageError(f"{SITE_CONFIG_ENV} points to {named}, which is not a file; ask your site admin")
        paths.append(named)
    if SYSTEM_SITE_CONFIG.is_file() and not (paths and _same_file(paths[0], SYSTEM_SITE_CONFIG)):
        paths.append(SYSTEM_SITE_CONFIG)
    return paths


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


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



MAX_TOML_BYTES = 1024 * 1024  # a site or user config is a few KB; a 54 MB one cost 570 MB to parse


def read_toml(path: Path) -> dict[str, Any]:
    """The TOML of a config file, its size bounded before it is read (and a FIFO or device never read). A config
    decides what runs as the user (template folders, commands): it is trusted as code, so one another user can
    write (owner, mode bits, ACL, its folder) is refused with the reason."""
    try:
        found = door.read(path, MAX_TOML_BYTES)
    except door.TooLargeError as exc:
        raise UsageError(f"config {path} is {exc.size} bytes, more than the {MAX_TOML_BYTES} a config may be; "
                         "is it the right file?") from None
    except (door.NotRegularError, IsADirectoryError):
        raise UsageError(f"config {path} is not a regular file; point to the TOML file itself") from None
    except OSError as exc:
        raise UsageError(f"cannot read config {path}: {exc.strerror or exc}; check the path and its permissions") from None
    refusal = untrusted_code(path, found.writers)
    if refusal:
        raise UsageError(f"config {path} refused: {refusal}; a config decides what runs as you, so only you (or root) "
                         "may be able to write it: chmod go-w it (and its folder), or keep your own copy in your home")
    raw = found.data
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise UsageError(f"config {path} is not UTF-8 text; save it as UTF-8") from None
    except RecursionError:
        raise UsageError(f"config {path} is nested too deeply to read; flatten it") from None
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        if "end of document" in message:  # tomllib names no line then: it is the last one
            last_line = raw.count(b"\n") or 1
            message = message.replace("end of document", f"end of document, line {last_line}")
        raise UsageError(f"config {path} is not valid TOML: {message}; fix that line") from None
    except ValueError as exc:  # an integer thousands of digits long
        raise UsageError(f"config {path}: {str(exc)[:120]}; give a real value") from None


def untrusted_code(path: Path, writers: door.Writers) -> str:
    """Why a file read as code is not trusted ("" when it is): someone else than the user or root owns it, or
    someone else can write it or swap it."""
    if writers.owner not in (os.geteuid(), 0):
        return f"it belongs to {door.trust.user_name(writers.owner)}, not you or root"
    return writers.why()


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


def parse_quiet_hours(entry: str, sources: tuple[Path, ...] = ()) -> QuietWindow:
    """"22:00-07:00" (every day), "Mon-Fri 12:00-13:00", "Sat,Sun 00:00-24:00"."""
    where = ", ".join(map(str, sources)) or "config"
    match = QUIET_ENTRY.match(entry.strip())
    if not match:
        raise UsageError(f"{where}: quiet_hours entry {entry!r} is not like \"22:00-07:00\" or \"Mon-Fri 12:00-13:00\"")
    start, start_eod = _clock(match["start"], entry, where)
    end, end_of_day = _clock(match["end"], entry, where)
    if start_eod:
        raise UsageError(f"{where}: quiet_hours entry {entry!r} cannot start at 24:00; use 00:00")
    days = _weekdays(match["days"], entry, where) if match["days"] else frozenset(range(7))
    return QuietWindow(start, end, days, entry.strip(), end_of_day=end_of_day)


def _clock(text: str, entry: str, where: str) -> tuple[time, bool]:
    hours, minutes = (int(part) for part in text.split(":"))
    if (hours, minutes) == (24, 0):
        return time(0, 0), True
    if hours > 23 or minutes > 59:
        raise UsageError(f"{where}: quiet_hours entry {entry!r} has an impossible time {text}")
    return time(hours, minutes), False


def _weekdays(text: str, entry: str, where: str) -> frozenset[int]:
    days: set[int] = set()
    for part in text.lower().split(","):
        first, _, last = part.partition("-")
        try:
            begin = WEEKDAYS.index(first[:3])
            finish = WEEKDAYS.index(last[:3]) if last else begin
        except ValueError:
            raise UsageError(f"{where}: quiet_hours entry {entry!r}: unknown weekday in {part!r} (use Mon..Sun)") from None
        day = begin
        days.add(day)
        while day != finish:
            day = (day + 1) % 7
            days.add(day)
    return frozenset(days)
