"""Small file-system helpers: atomic JSON writes, the per-user state folder, and the one bounded reader of files
the pre-flight touches (`read_bounded`: regular files only, never blocking, at most N bytes, under a deadline)."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import json
import os
import pwd
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

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
            os.chmod(path, 0o700)
        except OSError as exc:
            raise UsageError(f"the state folder {path} is readable or writable by others and cannot be made private "
                             f"({exc.strerror}): chmod 700 it, or set GUARDED_SBATCH_STATE_DIR") from None


def owner_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def make_private_dirs(path: Path) -> None:
    """mkdir -p with every folder it creates 0700 whatever the umask (existing ones are left as they are)."""
    missing = []
    current = Path(os.path.abspath(path))
    while not os.path.lexists(current):
        missing.append(current)
        current = current.parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            continue
        os.chmod(folder, 0o700)  # mkdir's mode is masked by the umask


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
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not (info.st_mode & 0o170000 == 0o100000) or info.st_size > MAX_JSON_BYTES:
            return None  # a FIFO or device planted in place of a state file, or a runaway file
        if own and info.st_uid != os.geteuid():
            return None  # another user's file in a folder they could write: never decides what we do
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(info.st_size + 1)  # read(n) allocates n bytes: the file's own size, not the cap
        return json.loads(data.decode("utf-8"))
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        return None
    finally:
        os.close(fd)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive flock on `<path>.lock` (created 0600) for a read-modify-write of `path`."""
    make_private_dirs(path.parent)
    fd = os.open(path.with_name(f".{path.name}.lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


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
        os.chmod(path, 0o700)
    except OSError:
        pass  # not ours to change (a shared folder given by the user)
    return path


def write_private(path: Path, text: str) -> None:
    """Write a text file readable only by its owner (0600), atomically, never through a symlink."""
    write_public_atomic(path, text, 0o600)


def write_public_atomic(path: Path, text: str, mode: int = 0o644) -> None:
    """Write a file atomically with `mode` whatever the umask (0644: the rendered policy, which cli_filter reads as
    each user), never through a symlink (mkstemp, then a rename); the folder must exist."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def read_tail(path: Path, max_bytes: int, *, own: bool = False) -> tuple[bytes, int]:
    """The last max_bytes of a regular file and its size; (b"", 0) for anything else (a FIFO never blocks), for
    a symlink (one swapped in for the log never leads into private files) and, with `own`, for a file that is
    not the current user's."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return b"", 0
    try:
        info = os.fstat(fd)
        if info.st_mode & 0o170000 != 0o100000 or (own and info.st_uid != os.geteuid()):
            return b"", 0
        start = max(0, info.st_size - max_bytes)
        return os.pread(fd, max_bytes, start), info.st_size
    except OSError:
        return b"", 0
    finally:
        os.close(fd)


def write_text_atomic(path: Path, text: str) -> None:
    """Write text to path (its folder created, 0700) through a temporary file and an atomic rename; mode 0600."""
    make_private_dirs(path.parent)
    write_private(path, text)


class TooLargeError(OSError):
    """A file over the reader's cap (its size in `size`)."""

    def __init__(self, path: str, size: int, cap: int) -> None:
        super().__init__(errno.EFBIG, f"{size} bytes, over the {cap} a file read here may be", path)
        self.size = size


_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket"))
PREFLIGHT_READ_SECONDS = 10.0


def read_bounded(path: str | os.PathLike[str], max_bytes: int, *, head: bool = False,
                 deadline_s: float = PREFLIGHT_READ_SECONDS) -> bytes:
    """The bytes of a regular file: opened without blocking (a FIFO never hangs the reader), refused unless the
    descriptor is a regular file (a link to /dev/zero, a FIFO, a socket: OSError naming what it is), at most
    max_bytes (TooLargeError beyond, or with `head` its first max_bytes) and read under a deadline (a file that
    keeps growing, a hung file server: OSError ETIMEDOUT). Files of /proc (size 0, endless) stop at the cap."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(errno.EISDIR, "Is a directory", os.fspath(path))
        if not stat.S_ISREG(info.st_mode):
            kind = next((name for test, name in _KINDS if test(info.st_mode)), "not a regular file")
            raise OSError(errno.EINVAL, f"{kind}, not a regular file: not read", os.fspath(path))
        if info.st_size > max_bytes and not head:
            raise TooLargeError(os.fspath(path), info.st_size, max_bytes)
        return _read_until(fd, os.fspath(path), max_bytes, head, time.monotonic() + deadline_s)
    finally:
        os.close(fd)


def _read_until(fd: int, path: str, max_bytes: int, head: bool, deadline: float) -> bytes:
    parts: list[bytes] = []
    total = 0
    while total <= max_bytes:
        if time.monotonic() > deadline:
            raise OSError(errno.ETIMEDOUT, "not read in time", path)
        piece = os.read(fd, min(1 << 20, max_bytes + 1 - total))
        if not piece:
            break
        parts.append(piece)
        total += len(piece)
    data = b"".join(parts)
    if len(data) > max_bytes:
        if not head:
            raise TooLargeError(path, len(data), max_bytes)
        data = data[:max_bytes]
    return data


def read_text_bounded(path: str | os.PathLike[str], max_bytes: int, *, errors: str = "strict", head: bool = False) -> str:
    """read_bounded, decoded as UTF-8 (UnicodeDecodeError when not, with errors="strict")."""
    return read_bounded(path, max_bytes, head=head).decode("utf-8", errors)
