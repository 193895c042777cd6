"""A local job's output and error files, opened as sbatch would (truncated, or appended with
--open-mode=append) but never through a link or into something that is not a file of the user's own.

In a folder others can write (a shared project folder), a co-worker can plant `slurm-<next id>.out` as a
link to the victim's `~/.bashrc`, a FIFO, or a file of their own they can read. The file is opened relative
to a handle on its folder, without following a link, created exclusively when it is new, and an existing
one is truncated only when it is a regular file of the user's with no other name (a hard link).
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat

from guarded_sbatch.core import door


class OutputRefused(Exception):
    """The job's output path is not a file the job may write; the message is one line for the user."""


def refusal(path: str, info: os.stat_result) -> str | None:
    """Why an existing path cannot be the job's output, or None when it can be written over."""
    if not stat.S_ISREG(info.st_mode):
        return f"{path} is {door.kind_of(info.st_mode)}; the job writes its output only to a regular file of its own"
    if info.st_uid != os.geteuid():
        return f"{path} belongs to another user (uid {info.st_uid}); remove it or name another --output"
    if info.st_nlink > 1:
        return f"{path} has another name (a hard link); remove it or name another --output"
    return None


def foreign_link(folder: str) -> str | None:
    """The first link on the way to `folder` that another user made (root's excepted: a site's /home -> /mnt):
    a co-worker who swaps a shared `logs/` for a link to the victim's home would have her job write there."""
    current = os.sep
    for part in os.path.abspath(folder).split(os.sep):
        if not part:
            continue
        current = os.path.join(current, part)
        try:
            info = os.lstat(current)
        except OSError:
            return None
        if stat.S_ISLNK(info.st_mode) and info.st_uid not in (os.geteuid(), 0):
            return f"{current} is a link another user made (uid {info.st_uid}); the job does not write through it"
    return None


def check_output_path(path: str) -> str | None:
    """At submission: why the path would be refused when the job starts (None: fine, or not there yet).
    Only looked at, never opened, so a FIFO there cannot hold the submission."""
    if os.path.abspath(path) == os.devnull:
        return None
    parent = os.path.dirname(path) or "."
    through = foreign_link(parent)
    if through:
        return through
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        # a folder that is not there yet is sbatch's case too (submitit makes logs/<job id> once the id is known):
        # the job fails at its start if it is still missing, as Slurm's does (FAILED 0:53)
        return None
    except OSError as exc:
        return f"{path}: {exc.strerror}"
    return refusal(path, info)


def _open_existing(name: str, flags: int, folder: int, path: str, append: bool) -> int:
    try:
        fd = door.open_raw(name, flags, dir_fd=folder)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OutputRefused(f"{path} is a symbolic link; the job does not write through links") from None
        if exc.errno == errno.ENXIO:
            raise OutputRefused(f"{path} is a FIFO; the job writes its output only to a regular file") from None
        raise
    try:
        why = refusal(path, os.fstat(fd))
        if why:
            raise OutputRefused(why)
        if not append:
            os.ftruncate(fd, 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_job_output(path: str, *, append: bool = False) -> int:
    """A write descriptor on the job's output file (blocking, close-on-exec cleared by the child's dup2)."""
    if os.path.abspath(path) == os.devnull:  # `--output=/dev/null`: the one device a job may write to
        return door.open_raw(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
    parent, name = os.path.split(path)
    through = foreign_link(parent or ".")
    if through:
        raise OutputRefused(through)
    flags = os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC | (os.O_APPEND if append else 0)
    try:
        folder = door.open_raw(parent or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise OutputRefused(f"cannot open the output folder {parent or '.'}: {exc.strerror}") from None
    try:
        try:
            fd = door.open_raw(name, flags | os.O_CREAT | os.O_EXCL, 0o666, dir_fd=folder)  # the umask applies, as in sbatch
        except FileExistsError:
            fd = _open_existing(name, flags, folder, path, append)
    except OutputRefused:
        raise
    except OSError as exc:
        raise OutputRefused(f"cannot open the output file {path}: {exc.strerror}") from None
    finally:
        os.close(folder)
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    return fd
