"""Site and user configuration (TOML): built-in defaults < site config < user config.

The site config's path comes from GUARDED_SBATCH_SITE_CONFIG (a modulefile sets it). The user config is
GUARDED_SBATCH_USER_CONFIG, else $XDG_CONFIG_HOME/guarded-sbatch/config.toml (~/.config/...). Keys the site
lists in `locked` (dotted paths, e.g. "checks.mandatory") cannot be changed by a user config.
"""

from __future__ import annotations

import copy
import os
import stat
import re
import shutil
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, time
from pathlib import Path
from typing import Any

from guarded_sbatch.core.errors import CommandError, UsageError
from guarded_sbatch.core.check_names import CHECK_NAMES
from guarded_sbatch.core.runner import run_command

SITE_CONFIG_ENV = "GUARDED_SBATCH_SITE_CONFIG"
USER_CONFIG_ENV = "GUARDED_SBATCH_USER_CONFIG"

DEFAULT_FORBIDDEN_NAMES: tuple[str, ...] = (
    r"(run|wave|phase|exp|try|trial|job|attempt|v)[-_]?\d+",
    r"test\d*",
    r"tmp\d*",
    r"temp\d*",
    r"debug\d*",
    r"foo|bar|baz|asdf|untitled|default|new|final|latest",
    r"[a-z]{1,3}-[a-z]{1,3}",  # initials like cs-ad
    r".*-internal",
)
DEFAULT_NAME_PATTERN = r"[a-z0-9][a-z0-9.]*(-[a-z0-9][a-z0-9.]*){2,}"

NOTIFY_EVENTS = ("stop", "wait_long", "crash", "sidecar_error")
SITE_ONLY_KEYS = ("locked", "enabled", "audit")  # a user config may not set these

DEFAULTS: dict[str, Any] = {
    "locked": [],
    "enabled": True,  # site switch-off: false makes the shim hand every job to the real sbatch untouched
    # alerts through apprise URLs (secrets: never printed or written); site and user URLs both get them
    "notify": {"urls": [], "on": list(NOTIFY_EVENTS), "wait_long_minutes": 60.0},
    # the admins' append-only record of launches, waivers, STOPs, kills, restarts and shim bypasses
    "audit": {"log": "", "syslog": False},
    "scheduler": "auto",
    "check_interval_minutes": 30.0,
    "run_roots": [],
    "template_dirs": [],
    "name_pattern": DEFAULT_NAME_PATTERN,
    "forbidden_names": list(DEFAULT_FORBIDDEN_NAMES),
    "quiet_hours": [],
    "checks": {"mandatory": [], "waivable": list(CHECK_NAMES)},
    "sidecar": {"partition": "", "account": "", "qos": "", "cpus": 1, "mem": "1G", "time": "", "template": "sidecar.sbatch",
                "fast_interval_seconds": 60.0, "job_poll_seconds": 300.0,
                # per-job: a sidecar job per run; per-user: one shared monitor job watches all of a user's runs
                "mode": "per-job", "max_runs_per_monitor": 200, "monitor_time": "", "monitor_mem": "2G"},
    # read by guarded_sbatch.site.policy (the shim and, rendered to Lua, Slurm's plugins); site config only
    "enforcement": {
        "unguarded_training": "tag",  # reject | tag | allow
        "launchers": ["python", "torchrun", "accelerate", "deepspeed"],
        "training_commands": [],
        "exempt_programs": ["guarded_sbatch", "submitit.core._submit", "pip"],
        "tag": "guarded-sbatch:unguarded",
        "tag_field": "admin_comment",
    },
    # jobs built from a launcher command (guarded-sbatch torchrun train.py ...): USR1 this long before the
    # time limit, then checkpoint and requeue up to max_requeues times
    "launcher": {"signal_margin_seconds": 300, "max_requeues": 3},
    "preflight": {
        "reference_dirs": ["configs", "recipes", "experiments"],
        "reference_max_depth": 3,
        "reference_max_age_days": 30.0,
        "stat_timeout_seconds": 5.0,
        "max_workers_on_network_fs": 4,
    },
}

_SIDECAR = DEFAULTS["sidecar"]
_PREFLIGHT = DEFAULTS["preflight"]

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


@dataclass(frozen=True)
class SidecarJobSettings:
    """The sidecar job's resources and cadence. Every default here is read from DEFAULTS (the one place)."""

    partition: str = _SIDECAR["partition"]
    account: str = _SIDECAR["account"]
    qos: str = _SIDECAR["qos"]
    cpus: int = _SIDECAR["cpus"]
    mem: str = _SIDECAR["mem"]
    time: str = _SIDECAR["time"]
    template: str = _SIDECAR["template"]
    fast_interval_s: float = _SIDECAR["fast_interval_seconds"]  # how often the sidecar reads new metrics
    job_poll_s: float = _SIDECAR["job_poll_seconds"]  # how often it may ask the scheduler (≤ 12 an hour)
    mode: str = _SIDECAR["mode"]  # "per-job" | "per-user" (one shared monitor job per user and cluster)
    max_runs_per_monitor: int = _SIDECAR["max_runs_per_monitor"]
    monitor_time: str = _SIDECAR["monitor_time"]  # the shared monitor's --time; it requeues itself before the limit
    monitor_mem: str = _SIDECAR["monitor_mem"]


@dataclass(frozen=True)
class LauncherSettings:
    signal_margin_s: int = DEFAULTS["launcher"]["signal_margin_seconds"]  # `--signal=B:USR1@<this>` in launcher jobs
    max_requeues: int = DEFAULTS["launcher"]["max_requeues"]  # how often such a job requeues itself after checkpointing


@dataclass(frozen=True)
class Config:
    mandatory_checks: frozenset[str] = frozenset()
    waivable_checks: frozenset[str] = frozenset(CHECK_NAMES)
    run_roots: tuple[Path, ...] = ()
    name_pattern: str = DEFAULT_NAME_PATTERN
    forbidden_names: tuple[str, ...] = DEFAULT_FORBIDDEN_NAMES
    quiet_hours: tuple[QuietWindow, ...] = ()
    sidecar: SidecarJobSettings = SidecarJobSettings()
    launcher: LauncherSettings = LauncherSettings()
    template_dirs: tuple[Path, ...] = ()
    scheduler: str = DEFAULTS["scheduler"]  # "slurm" | "local" | "auto"
    check_interval_s: float = DEFAULTS["check_interval_minutes"] * 60.0
    reference_dirs: tuple[str, ...] = tuple(_PREFLIGHT["reference_dirs"])
    reference_max_depth: int = _PREFLIGHT["reference_max_depth"]
    reference_max_age_days: float = _PREFLIGHT["reference_max_age_days"]
    stat_timeout_s: float = _PREFLIGHT["stat_timeout_seconds"]
    max_workers_on_network_fs: int = _PREFLIGHT["max_workers_on_network_fs"]
    locked: frozenset[str] = frozenset()
    enabled: bool = True
    notify_urls: tuple[str, ...] = field(default=(), repr=False)  # secrets
    notify_on: frozenset[str] = frozenset(NOTIFY_EVENTS)
    notify_wait_long_s: float = 3600.0
    audit_log: Path | None = None
    audit_syslog: bool = False
    sources: tuple[Path, ...] = field(default=(), compare=False)  # files it was loaded from

    def can_waive(self, check: str) -> bool:
        return check not in self.mandatory_checks and check in self.waivable_checks

    def in_quiet_hours(self, moment: datetime) -> QuietWindow | None:
        return next((window for window in self.quiet_hours if window.contains(moment)), None)

    def scheduler_backend(self) -> str:
        """"slurm" or "local": the configured one, or for "auto" slurm when sbatch is on PATH and answers."""
        if self.scheduler != "auto":
            return self.scheduler
        return "slurm" if sbatch_answers() else "local"


def sbatch_answers(timeout_s: float = 10.0) -> bool:
    if shutil.which("sbatch") is None:
        return False

    try:
        result = run_command(["sbatch", "--version"], timeout=timeout_s, check=False)
    except CommandError:
        return False
    return result.returncode == 0


def user_config_path(env: Mapping[str, str]) -> Path:
    if env.get(USER_CONFIG_ENV):
        return Path(env[USER_CONFIG_ENV]).expanduser()
    base = Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else Path.home() / ".config"
    return base / "guarded-sbatch" / "config.toml"


def load_config(
    *, site_path: Path | None = None, user_path: Path | None = None, env: Mapping[str, str] | None = None
) -> Config:
    """Load defaults, then the site config, then the user config; refuse user changes to locked keys."""
    environ = os.environ if env is None else env
    if site_path is None and environ.get(SITE_CONFIG_ENV):
        site_path = Path(environ[SITE_CONFIG_ENV]).expanduser()
        if not site_path.is_file():
            raise UsageError(f"{SITE_CONFIG_ENV} points to {site_path}, which is not a file; ask your site admin")
    explicit_user = user_path is not None or bool(environ.get(USER_CONFIG_ENV))
    if user_path is None:
        user_path = user_config_path(environ)
    if explicit_user and not user_path.is_file():
        raise UsageError(f"user config {user_path} does not exist; create it or unset {USER_CONFIG_ENV}")
    merged = copy.deepcopy(DEFAULTS)
    sources: list[Path] = []
    site: dict[str, Any] = {}
    if site_path is not None:
        site = read_toml(site_path)
        _check_known_keys(site, DEFAULTS, site_path)
        _deep_merge(merged, site)
        sources.append(site_path)
    if user_path.is_file():
        user = read_toml(user_path)
        _check_known_keys(user, DEFAULTS, user_path)
        for key in SITE_ONLY_KEYS:
            if key in user:
                raise UsageError(f"{user_path}: '{key}' belongs in the site config only; remove it from your config")
        _refuse_locked_changes(user, merged, [str(k) for k in merged.get("locked", [])], user_path, site_path)
        site_urls = list(merged["notify"]["urls"])
        _deep_merge(merged, user)
        if isinstance(merged["notify"].get("urls"), list):
            merged["notify"]["urls"] = site_urls + [u for u in merged["notify"]["urls"] if u not in site_urls]
        sources.append(user_path)
    return _build(merged, sources[-1] if sources else Path("<defaults>"), tuple(sources), environ)


MAX_NUMBER = 1e9  # seconds, counts, sizes: anything larger (1e308, a 400-digit integer) is a typo or an attack


MAX_TOML_BYTES = 1024 * 1024  # a site or user config is a few KB; a 54 MB one cost 570 MB to parse


def read_toml(path: Path) -> dict[str, Any]:
    """The TOML of a config file, its size bounded before it is read (and a FIFO or device never read)."""
    try:
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), "rb", buffering=0) as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise UsageError(f"config {path} is not a regular file; point to the TOML file itself")
            if info.st_size > MAX_TOML_BYTES:
                raise UsageError(f"config {path} is {info.st_size} bytes, more than the {MAX_TOML_BYTES} a config may be; "
                                 "is it the right file?")
            raw = handle.read(MAX_TOML_BYTES + 1)
        if len(raw) > MAX_TOML_BYTES:
            raise UsageError(f"config {path} grew past {MAX_TOML_BYTES} bytes while read; is it the right file?")
    except OSError as exc:
        raise UsageError(f"cannot read config {path}: {exc.strerror or exc}; check the path and its permissions") from None
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


def _check_known_keys(data: Mapping[str, Any], known: Mapping[str, Any], path: Path, prefix: str = "") -> None:
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if key not in known:
            choices = ", ".join(f"{prefix}{k}" for k in known)
            raise UsageError(f"{path}: unknown key '{dotted}'; known keys here: {choices}")
        if isinstance(known[key], dict):
            if not isinstance(value, dict):
                raise UsageError(f"{path}: '{dotted}' must be a table ([{dotted}]), not {type(value).__name__}")
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

    def str_list(key: str, value: Any) -> list[str]:
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise fail(key, "must be a list of strings")
        return value

    def number(key: str, value: Any, kind: type[int] | type[float]) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_NUMBER:
            raise fail(key, f"must be a positive {kind.__name__} no larger than {MAX_NUMBER:g}")
        return kind(value)

    checks = data["checks"]
    mandatory = str_list("checks.mandatory", checks["mandatory"])
    waivable = str_list("checks.waivable", checks["waivable"])
    for name in [*mandatory, *waivable]:
        if name not in CHECK_NAMES:
            raise fail("checks", f"names an unknown check {name!r}; the checks are {', '.join(CHECK_NAMES)}")
    scheduler = data["scheduler"]
    if scheduler not in ("auto", "slurm", "local"):
        raise fail("scheduler", f"must be \"slurm\", \"local\" or \"auto\", not {scheduler!r}")
    name_pattern = data["name_pattern"]
    forbidden = str_list("forbidden_names", data["forbidden_names"])
    for key, pattern in [("name_pattern", name_pattern), *[("forbidden_names", f) for f in forbidden]]:
        if not isinstance(pattern, str):
            raise fail(key, "must be a string (a regular expression)")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise fail(key, f"is not a valid regular expression ({pattern!r}: {exc})") from None
    sidecar = data["sidecar"]
    preflight = data["preflight"]
    launcher = data["launcher"]
    notify = data["notify"]
    notify_on = str_list("notify.on", notify["on"])
    for event in notify_on:
        if event not in NOTIFY_EVENTS:
            raise fail("notify.on", f"names an unknown event {event!r}; the events are {', '.join(NOTIFY_EVENTS)}")
    if not isinstance(data["enabled"], bool):
        raise fail("enabled", "must be true or false")
    audit = data["audit"]
    if not isinstance(audit["log"], str) or not isinstance(audit["syslog"], bool):
        raise fail("audit", "needs log = \"PATH\" (or \"\") and syslog = true|false")
    max_requeues = launcher["max_requeues"]
    if isinstance(max_requeues, bool) or not isinstance(max_requeues, int) or max_requeues < 0:
        raise fail("launcher.max_requeues", "must be a whole number ≥ 0")
    return Config(
        mandatory_checks=frozenset(mandatory),
        waivable_checks=frozenset(waivable) - frozenset(mandatory),
        run_roots=tuple(_expand_path(p, env) for p in str_list("run_roots", data["run_roots"])),
        name_pattern=name_pattern,
        forbidden_names=tuple(forbidden),
        quiet_hours=tuple(parse_quiet_hours(entry, sources) for entry in str_list("quiet_hours", data["quiet_hours"])),
        sidecar=SidecarJobSettings(
            partition=str(sidecar["partition"]),
            account=str(sidecar["account"]),
            qos=str(sidecar["qos"]),
            cpus=int(number("sidecar.cpus", sidecar["cpus"], int)),
            mem=str(sidecar["mem"]),
            time=str(sidecar["time"]),
            template=str(sidecar["template"]),
            fast_interval_s=float(number("sidecar.fast_interval_seconds", sidecar["fast_interval_seconds"], float)),
            job_poll_s=float(number("sidecar.job_poll_seconds", sidecar["job_poll_seconds"], float)),
            mode=_monitor_mode(sidecar["mode"], fail),
            max_runs_per_monitor=int(number("sidecar.max_runs_per_monitor", sidecar["max_runs_per_monitor"], int)),
            monitor_time=str(sidecar["monitor_time"]),
            monitor_mem=str(sidecar["monitor_mem"]),
        ),
        launcher=LauncherSettings(
            signal_margin_s=int(number("launcher.signal_margin_seconds", launcher["signal_margin_seconds"], int)),
            max_requeues=max_requeues,
        ),
        template_dirs=tuple(_expand_path(p, env) for p in str_list("template_dirs", data["template_dirs"])),
        scheduler=scheduler,
        check_interval_s=number("check_interval_minutes", data["check_interval_minutes"], float) * 60.0,
        reference_dirs=tuple(str_list("preflight.reference_dirs", preflight["reference_dirs"])),
        reference_max_depth=int(number("preflight.reference_max_depth", preflight["reference_max_depth"], int)),
        reference_max_age_days=number("preflight.reference_max_age_days", preflight["reference_max_age_days"], float),
        stat_timeout_s=number("preflight.stat_timeout_seconds", preflight["stat_timeout_seconds"], float),
        max_workers_on_network_fs=int(
            number("preflight.max_workers_on_network_fs", preflight["max_workers_on_network_fs"], int)
        ),
        locked=frozenset(str_list("locked", data["locked"])),
        enabled=data["enabled"],
        notify_urls=tuple(str_list("notify.urls", notify["urls"])),
        notify_on=frozenset(notify_on),
        notify_wait_long_s=number("notify.wait_long_minutes", notify["wait_long_minutes"], float) * 60.0,
        audit_log=_expand_path(audit["log"], env) if audit["log"] else None,
        audit_syslog=audit["syslog"],
        sources=sources,
    )


def _expand_path(text: str, env: Mapping[str, str]) -> Path:
    """`~` and `$VAR`/`${VAR}` from the environment; no shell is involved."""
    expanded = re.sub(r"\$(\w+)|\$\{(\w+)\}", lambda m: env.get(m.group(1) or m.group(2), m.group(0)), text)
    return Path(expanded).expanduser()


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


def _monitor_mode(value: object, fail: Any) -> str:
    if value not in ("per-job", "per-user"):
        raise fail("sidecar.mode", f"must be \"per-job\" or \"per-user\", not {value!r}")
    return str(value)
