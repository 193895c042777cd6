"""The state folder's policy and the JSON/text helpers the rooms share, all through the door (core/door/): this
module opens, writes, locks and deletes nothing itself. `read_bounded` is door.read's bytes for the callers that
weigh no writers (the pre-flight's script and configs)."""

from __future__ import annotations

import functools
import json
import os
import pwd
from collections.abc import Callable
from pathlib import Path
from typing import Any

from guarded_sbatch.core import door
from guarded_sbatch.core.errors import UsageError
from guarded_sbatch.core.jsonnum import json_safe


def state_dir() -> Path:
    """Where guarded-sbatch keeps its own state ($GUARDED_SBATCH_STATE_DIR, else XDG state home), made private.

    Like ssh's StrictModes: the folder must be the user's own (another user's is refused with one line) and
    private (a group- or world-accessible one of the user's is repaired to 0700), because what lies in it decides
    what the tool runs and deletes as the user. Missing levels are created 0700 whatever the umask."""
    explicit = os.environ.get("GUARDED_SBATCH_STATE_DIR")
    if explicit:
        path = Path(explicit)
    else:
        base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
        path = Path(base) / "guarded-sbatch"
    _check_private_folder(str(path), os.geteuid())
    return path


@functools.lru_cache(maxsize=16)
def _check_private_folder(text: str, uid: int) -> None:
    path = Path(text)
    try:
        make_private_dirs(path)
        info = os.stat(path)
    except OSError as exc:
        raise UsageError(f"cannot use the state folder {path}: {exc.strerror or exc}; set GUARDED_SBATCH_STATE_DIR "
                         "to a private folder of your own") from None
    if info.st_uid != uid:
        raise UsageError(f"the state folder {path} belongs to {owner_name(info.st_uid)}, not you: refused (whoever owns "
                         "it decides what guarded-sbatch runs as you); set GUARDED_SBATCH_STATE_DIR to a private "
                         "folder of your own")
    if info.st_mode & 0o077:
        try:
            door.chmod_own_folder(path, 0o700)
        except OSError as exc:
            raise UsageError(f"the state folder {path} is readable or writable by others and cannot be made private "
                             f"({exc.strerror}): chmod 700 it, or set GUARDED_SBATCH_STATE_DIR") from None


def owner_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


make_private_dirs = door.make_private_dirs


def owned_by_me(path: Path) -> bool:
    """The file is there and the current user's own (not a co-worker's planted in a shared folder)."""
    try:
        return os.lstat(path).st_uid == os.geteuid()
    except OSError:
        return False


def write_json_atomic(path: Path, data: Any) -> None:
    make_private_dirs(path.parent)
    # one encoding for NaN/Infinity everywhere (core/jsonnum.py)
    write_private(path, json.dumps(json_safe(data), indent=2, sort_keys=True, default=str, allow_nan=False) + "\n")


MAX_JSON_BYTES = 16 * 1024 * 1024


def read_json(path: Path, *, own: bool = False) -> Any | None:
    """The JSON in path, or None when it is missing, half-written, not a regular file, huge or too deep
    (or, with `own`, not the current user's file)."""
    try:
        return json.loads(door.read(path, MAX_JSON_BYTES, own=own).text())
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        return None


locked = door.locked


def update_json(path: Path, change: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
    """Locked read-modify-write of a JSON object file, replaced atomically; returns what was written."""
    with locked(path):
        raw = read_json(path)
        data: dict[str, Any] = raw if isinstance(raw, dict) else {}
        change(data)
        write_json_atomic(path, data)
    return data


def private_dir(path: Path) -> Path:
    """Create `path` (and parents, each 0700) with the folder itself 0700."""
    make_private_dirs(path)
    try:
        door.chmod_own_folder(path, 0o700)
    except OSError:
        pass  # not ours to change (a shared folder given by the user)
    return path


def write_private(path: Path, text: str) -> None:
    """Write a text file readable only by its owner (0600), atomically, never through a symlink."""
    door.write_atomic(path, text, 0o600)


def write_public_atomic(path: Path, text: str, mode: int = 0o644) -> None:
    """Write a file atomically with `mode` whatever the umask (0644: the rendered policy, which cli_filter reads as
    each user), never through a symlink; the folder must exist."""
    door.write_atomic(path, text, mode)


def read_tail(path: Path, max_bytes: int, *, own: bool = False) -> tuple[bytes, int]:
    """The last max_bytes of a regular file and its size; (b"", 0) for anything else (a FIFO never blocks), for
    a symlink (one swapped in for the log never leads into private files) and, with `own`, for a file that is
    not the current user's."""
    try:
        found = door.read(path, max_bytes, own=own, tail=True, nofollow=True)
    except OSError:
        return b"", 0
    return found.data, found.size


def write_text_atomic(path: Path, text: str) -> None:
    """Write text to path (its folder created, 0700) through a temporary file and an atomic rename; mode 0600."""
    make_private_dirs(path.parent)
    write_private(path, text)


TooLargeError = door.TooLargeError
PREFLIGHT_READ_SECONDS = door.READ_DEADLINE_S


def read_bounded(path: str | os.PathLike[str], max_bytes: int, *, head: bool = False,
                 deadline_s: float = PREFLIGHT_READ_SECONDS) -> bytes:
    """The bytes of a regular file (door.read: never blocking, refused unless regular, at most max_bytes,
    under a deadline)."""
    return door.read(path, max_bytes, head=head, deadline_s=deadline_s).data


def read_text_bounded(path: str | os.PathLike[str], max_bytes: int, *, errors: str = "strict", head: bool = False) -> str:
    """read_bounded, decoded as UTF-8 (UnicodeDecodeError when not, with errors="strict")."""
    return read_bounded(path, max_bytes, head=head).decode("utf-8", errors)
