"""The door's less common ways in: the kernel's /proc files, lock files of the state folder, a raw descriptor for
code that manages its own (the local backend's job outputs: O_NOFOLLOW required whenever it may create or write),
and anonymous or private temporary files."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

PROC_MAX_BYTES = 4 << 20


def read_proc(path: str | os.PathLike[str], max_bytes: int = PROC_MAX_BYTES) -> bytes:
    """A file of /proc (the kernel writes it: no writers to weigh), read up to max_bytes without blocking."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
    try:
        parts: list[bytes] = []
        total = 0
        while total < max_bytes:
            piece = os.read(fd, min(1 << 16, max_bytes - total))
            if not piece:
                break
            parts.append(piece)
            total += len(piece)
        return b"".join(parts)
    finally:
        os.close(fd)


def open_raw(path: str | os.PathLike[str], flags: int, mode: int = 0o600, *, dir_fd: int | None = None) -> int:
    """os.open for code that manages the descriptor itself; a write or create must carry O_NOFOLLOW (a link at an
    output path is never written through) and every open O_NONBLOCK unless it is a folder."""
    writes = flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND)
    if writes and not flags & os.O_NOFOLLOW and os.fspath(path) != os.devnull:
        raise ValueError(f"door.open_raw({os.fspath(path)!r}): a write without O_NOFOLLOW")
    return os.open(path, flags | os.O_CLOEXEC, mode, dir_fd=dir_fd)


@contextlib.contextmanager
def lock_file(path: str | os.PathLike[str], *, deadline_s: float = 30.0, shared: bool = False) -> Iterator[int]:
    """An flock on the lock file `path` (created 0600, never through a link, O_NONBLOCK: a FIFO planted there is
    refused), taken with a deadline (door.LockTimeoutError); yields the descriptor (the lock's file may hold data)."""
    from guarded_sbatch.core.door import LinkRefusedError, NotRegularError, lock  # noqa: PLC0415 - the package

    label = os.fspath(path)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise LinkRefusedError(errno.ELOOP, "a symbolic link: refused as a lock file", label) from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegularError(errno.EINVAL, "not a regular file: refused as a lock file", label)
        lock(fd, label, exclusive=not shared, deadline_s=deadline_s)
        yield fd
    finally:
        os.close(fd)


def anonymous_file() -> IO[bytes]:
    """An unnamed temporary file (a child's captured output): no name, so nothing to plant or follow."""
    return tempfile.TemporaryFile()


def make_temp_dir(prefix: str, folder: str | os.PathLike[str] | None = None) -> Path:
    """A fresh 0700 folder of the user's (mkdtemp, in `folder` or the system's), the caller's to remove
    (`remove_own_temp_dir`)."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir=folder))


def remove_own_temp_dir(folder: str | os.PathLike[str]) -> None:
    """Remove a folder made by make_temp_dir (shutil.rmtree: it never follows a link inside)."""
    shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def private_temp_dir(prefix: str) -> Iterator[Path]:
    """A fresh 0700 folder of the user's (mkdtemp), removed with what is in it afterwards."""
    folder = make_temp_dir(prefix)
    try:
        yield folder
    finally:
        remove_own_temp_dir(folder)
