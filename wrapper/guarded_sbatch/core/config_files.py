"""Which configuration files are read, and how one is read: the site configs (the one GUARDED_SBATCH_SITE_CONFIG
names, a modulefile sets it, and the system one at a fixed path), the user config (GUARDED_SBATCH_USER_CONFIG, else
$XDG_CONFIG_HOME/guarded-sbatch/config.toml), each read bounded and trusted only when no one else can write it.
core/config.py merges them.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from guarded_sbatch.core import door
from guarded_sbatch.core.errors import UsageError

SITE_CONFIG_ENV = "GUARDED_SBATCH_SITE_CONFIG"
# The admins' site config at a fixed system path: always read when it is there, whatever the environment says
# (unsetting GUARDED_SBATCH_SITE_CONFIG drops nothing); a config the variable names is merged below it.
SYSTEM_SITE_CONFIG = Path("/etc/guarded-sbatch/site.toml")
USER_CONFIG_ENV = "GUARDED_SBATCH_USER_CONFIG"


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

