"""What the door refuses, each a named OSError: a file that is not a regular one, another user's file, a link at an
output path, a lock held past its deadline, a file over a reader's cap."""

from __future__ import annotations

import errno
import stat


class NotRegularError(OSError):
    """A FIFO, a device, a socket or a folder where a regular file was expected: never opened for reading."""


class NotOwnError(OSError):
    """Another user's file where only the user's own may be read or written."""


class LinkRefusedError(OSError):
    """A symbolic link at an output path (or on the way to it): refused, never written through."""


class LockTimeoutError(OSError):
    """A lock another process holds past the deadline: a named failure, never a hang."""


class TooLargeError(OSError):
    """A file over the reader's cap (its size in `size`)."""

    def __init__(self, path: str, size: int, cap: int) -> None:
        super().__init__(errno.EFBIG, f"{size} bytes, over the {cap} a file read here may be", path)
        self.size = size


def kind_of(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "not a regular file"
