"""Small file-system helpers: atomic JSON writes and the per-user state folder."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from guarded_sbatch.core.jsonnum import json_safe


def state_dir() -> Path:
    """Where guarded-sbatch keeps its own state ($GUARDED_SBATCH_STATE_DIR, else XDG state home)."""
    explicit = os.environ.get("GUARDED_SBATCH_STATE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "guarded-sbatch"


def write_json_atomic(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    # one encoding for NaN/Infinity everywhere (core/jsonnum.py)
    write_private(path, json.dumps(json_safe(data), indent=2, sort_keys=True, default=str, allow_nan=False) + "\n")


MAX_JSON_BYTES = 16 * 1024 * 1024


def read_json(path: Path) -> Any | None:
    """The JSON in path, or None when it is missing, half-written, not a regular file, huge or too deep."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not (info.st_mode & 0o170000 == 0o100000) or info.st_size > MAX_JSON_BYTES:
            return None  # a FIFO or device planted in place of a state file, or a runaway file
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(MAX_JSON_BYTES + 1)
        return json.loads(data.decode("utf-8"))
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        return None
    finally:
        os.close(fd)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive flock on `<path>.lock` (created 0600) for a read-modify-write of `path`."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
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
    """Create `path` (and parents) with the folder itself 0700."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        os.chmod(path, 0o700)
    except OSError:
        pass  # not ours to change (a shared folder given by the user)
    return path


def write_private(path: Path, text: str) -> None:
    """Write a text file readable only by its owner (0600), atomically, never through a symlink."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)  # mkstemp: 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def read_tail(path: Path, max_bytes: int) -> tuple[bytes, int]:
    """The last max_bytes of a regular file and its size; (b"", 0) for anything else (a FIFO never blocks)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return b"", 0
    try:
        info = os.fstat(fd)
        if info.st_mode & 0o170000 != 0o100000:
            return b"", 0
        start = max(0, info.st_size - max_bytes)
        return os.pread(fd, max_bytes, start), info.st_size
    except OSError:
        return b"", 0
    finally:
        os.close(fd)


def write_text_atomic(path: Path, text: str) -> None:
    """Write text to path (its folder created) through a temporary file and an atomic rename; mode 0600."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_private(path, text)
