"""The door's reads: a regular file opened read-only without blocking (never a FIFO or a device), its bytes under a
cap and a deadline, returned with who can write it (`Writers`, trust.py)."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass

from guarded_sbatch.core.door import trust
from guarded_sbatch.core.door.refusals import LinkRefusedError, NotOwnError, NotRegularError, TooLargeError, kind_of
from guarded_sbatch.core.door.trust import Writers, writers_of

READ_DEADLINE_S = 10.0
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)


@dataclass(frozen=True)
class Read:
    """The bytes of a file and who besides its owner could have written them."""

    data: bytes
    writers: Writers
    size: int  # the file's size when read

    def text(self, errors: str = "strict") -> str:
        return self.data.decode("utf-8", errors)


@dataclass(frozen=True)
class Opened:
    """A regular file open for reading: its descriptor, fstat and writers (see `opened`)."""

    fd: int
    info: os.stat_result
    writers: Writers
    path: str

    def pread(self, count: int, offset: int) -> bytes:
        return pread_all(self.fd, offset, count)


@contextlib.contextmanager
def opened(path: str | os.PathLike[str], *, own: bool = False, nofollow: bool = False,
           dir_fd: int | None = None) -> Iterator[Opened]:
    """A regular file opened read-only without blocking; NotRegularError naming what it is otherwise, NotOwnError
    (with `own`) for another user's file, LinkRefusedError (with `nofollow`) for a link."""
    label = os.fspath(path)
    try:
        fd = os.open(path, _READ_FLAGS | (os.O_NOFOLLOW if nofollow else 0), dir_fd=dir_fd)
    except OSError as exc:
        if nofollow and exc.errno == errno.ELOOP:
            raise LinkRefusedError(errno.ELOOP, "a symbolic link: not followed", label) from None
        raise
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(errno.EISDIR, "Is a directory", label)
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularError(errno.EINVAL, f"{kind_of(info.st_mode)}, not a regular file: not read", label)
        if own and info.st_uid != os.geteuid():
            raise NotOwnError(errno.EPERM, f"owned by {trust.user_name(info.st_uid)}, not you: not read", label)
        yield Opened(fd, info, writers_of(label, info, fd), label)
    finally:
        os.close(fd)


def read(path: str | os.PathLike[str], max_bytes: int, *, own: bool = False, head: bool = False,
         tail: bool = False, nofollow: bool = False, deadline_s: float = READ_DEADLINE_S) -> Read:
    """The bytes of a regular file with its writers: at most max_bytes (TooLargeError beyond, or with `head` its
    first max_bytes, with `tail` its last), under a deadline (a hung file server: ETIMEDOUT). Files of /proc
    (size 0, endless) stop at the cap."""
    with opened(path, own=own, nofollow=nofollow) as file:
        size = file.info.st_size
        if tail:
            start = max(0, size - max_bytes)
            return Read(file.pread(max_bytes, start), file.writers, size)
        if size > max_bytes and not head:
            raise TooLargeError(file.path, size, max_bytes)
        data = _read_until(file.fd, file.path, max_bytes, head, time.monotonic() + deadline_s)
        return Read(data, file.writers, size)


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


def pread_all(fd: int, offset: int, count: int) -> bytes:
    """Up to `count` bytes of an open file from `offset`, in pieces of at most 4 MiB (a short read is its end)."""
    parts: list[bytes] = []
    while count > 0:
        piece = os.pread(fd, min(count, 4 << 20), offset)
        if not piece:
            break
        parts.append(piece)
        offset += len(piece)
        count -= len(piece)
    return b"".join(parts)
