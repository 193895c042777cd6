"""The door's writes: outputs created from their folder's descriptor, never through a link (O_NOFOLLOW, O_EXCL where
they must be new), replaced atomically or appended under a lock taken with a deadline; folders made, files renamed
and removed the same way."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

from guarded_sbatch.core.door import trust
from guarded_sbatch.core.door.refusals import LinkRefusedError, LockTimeoutError, NotOwnError, NotRegularError, kind_of

LOCK_DEADLINE_S = 5.0
_DIR_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def lock(fd: int, path: str | os.PathLike[str], *, exclusive: bool = True, deadline_s: float = LOCK_DEADLINE_S,
         poll_s: float = 0.05) -> None:
    """flock(fd) with LOCK_NB, polled until `deadline_s`; LockTimeoutError naming the file when another process
    holds it that long (a co-worker's `flock -s` on a file he can read must never freeze us)."""
    operation = (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            fcntl.flock(fd, operation)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise LockTimeoutError(errno.ETIMEDOUT, f"locked by another process for over {deadline_s:g} s "
                                       "(someone holds a lock on it): not written", os.fspath(path)) from None
            time.sleep(poll_s)


def open_dir(folder: str | os.PathLike[str], *, dir_fd: int | None = None) -> int:
    """A folder opened as a descriptor without following a link at its last component; a link on the way made by
    another user (a co-worker's `notes -> ~you/.config`) is refused (LinkRefusedError)."""
    label = os.fspath(folder)
    if dir_fd is None:
        me = os.geteuid()
        for ancestor in [Path(label), *Path(os.path.abspath(label)).parents]:
            try:
                info = os.lstat(ancestor)
            except OSError:
                continue
            if stat.S_ISLNK(info.st_mode) and info.st_uid not in (0, me):
                raise LinkRefusedError(errno.ELOOP, f"{ancestor} on the way is a link made by "
                                       f"{trust.user_name(info.st_uid)}: refused", label)
    try:  # O_PATH: a folder the user may write but not list (an admin's 1733 audit folder) is opened too
        return os.open(folder, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise LinkRefusedError(errno.ELOOP, "a symbolic link: refused (never followed)", label) from None
        raise


def make_dirs(path: str | os.PathLike[str]) -> None:
    """mkdir -p under the umask (a folder of a shared project keeps the site's group rights)."""
    make_private_dirs(path, None)


def make_private_dirs(path: str | os.PathLike[str], mode: int | None = 0o700) -> None:
    """mkdir -p with every folder it creates `mode` whatever the umask (existing ones are left as they are);
    mode None: the umask's."""
    missing = []
    current = Path(os.path.abspath(path))
    while not os.path.lexists(current):
        missing.append(current)
        current = current.parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, 0o777 if mode is None else mode)
        except FileExistsError:
            continue
        if mode is not None:
            chmod_own_folder(folder, mode)  # mkdir's mode is masked by the umask


def chmod_own_folder(path: str | os.PathLike[str], mode: int) -> None:
    """chmod a folder of the user's, through a descriptor opened without following a link."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


def _refuse_link(folder_fd: int, name: str, label: str) -> None:
    try:
        info = os.stat(name, dir_fd=folder_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(info.st_mode):
        raise LinkRefusedError(errno.ELOOP, f"a symbolic link (to {os.readlink(name, dir_fd=folder_fd)}) stands at "
                               "this output path: refused, nothing written through it", label)
    if not stat.S_ISREG(info.st_mode):
        raise NotRegularError(errno.EINVAL, f"{kind_of(info.st_mode)} stands at this output path: not replaced", label)


def write_atomic(path: str | os.PathLike[str], data: bytes | str, mode: int = 0o600, *,
                 make_folder: bool = False, durable: bool = False) -> None:
    """Replace `path` with `data` (mode `mode` whatever the umask): a new file made O_EXCL|O_NOFOLLOW in the
    folder's descriptor, then renamed over the name. A link (or a FIFO, a device) at `path` is refused and named."""
    target = Path(os.path.abspath(path))
    if make_folder:
        make_private_dirs(target.parent)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    folder_fd = open_dir(target.parent)
    try:
        _refuse_link(folder_fd, target.name, os.fspath(path))
        temp = f".{target.name}.{os.getpid()}.{time.monotonic_ns() % 10**9}"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=folder_fd)
        try:
            os.fchmod(fd, mode)
            _write_all(fd, payload)
            if durable:
                os.fsync(fd)
            os.close(fd)
            fd = -1
            os.replace(temp, target.name, src_dir_fd=folder_fd, dst_dir_fd=folder_fd)
        except BaseException:
            if fd >= 0:
                os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=folder_fd)
            raise
    finally:
        os.close(folder_fd)


def write_new(path: str | os.PathLike[str], data: bytes | str, mode: int = 0o600) -> None:
    """Create `path` (it must not exist: FileExistsError, a link there included) and write `data`."""
    target = Path(os.path.abspath(path))
    payload = data.encode("utf-8") if isinstance(data, str) else data
    folder_fd = open_dir(target.parent)
    try:
        fd = os.open(target.name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode,
                     dir_fd=folder_fd)
    finally:
        os.close(folder_fd)
    try:
        os.fchmod(fd, mode)
        _write_all(fd, payload)
    finally:
        os.close(fd)


def _write_all(fd: int, payload: bytes) -> None:
    written = 0
    while written < len(payload):
        written += os.write(fd, payload[written:])


def append(path: str | os.PathLike[str], data: bytes, mode: int = 0o600, *, own: bool = False,
           lock_deadline_s: float = LOCK_DEADLINE_S) -> None:
    """Append `data` as one write under an exclusive lock taken with a deadline, to a regular file opened from its
    folder's descriptor O_NOFOLLOW|O_NONBLOCK (created `mode` when new). A link (symbolic, or a file with more than
    one name), a FIFO, another user's file (with `own`) or a lock held past the deadline: a named OSError, never a
    hang, nothing written."""
    target = Path(os.path.abspath(path))
    label = os.fspath(path)
    folder_fd = open_dir(target.parent)
    flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        try:
            fd = os.open(target.name, flags | os.O_CREAT | os.O_EXCL, mode, dir_fd=folder_fd)
            os.fchmod(fd, mode)  # the creation mode is masked by the umask
        except FileExistsError:
            fd = os.open(target.name, flags, dir_fd=folder_fd)
            names = os.fstat(fd).st_nlink
            if names > 1:  # a hard link: the same bytes under another name, perhaps another file of yours
                os.close(fd)
                raise LinkRefusedError(errno.EMLINK, f"a hard link ({names} names for one file): refused, nothing "
                                       "written through it", label) from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise LinkRefusedError(errno.ELOOP, "a symbolic link: refused, nothing written through it", label) from None
        if exc.errno == errno.ENXIO:  # O_NONBLOCK|O_WRONLY on a FIFO with no reader
            raise NotRegularError(errno.EINVAL, "a FIFO, not a regular file: not written", label) from None
        raise
    finally:
        os.close(folder_fd)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularError(errno.EINVAL, f"{kind_of(info.st_mode)}, not a regular file: not written", label)
        if own and info.st_uid != os.geteuid():
            raise NotOwnError(errno.EPERM, f"belongs to uid {info.st_uid}, not you ({trust.user_name(info.st_uid)}): "
                              "not written", label)
        lock(fd, label, deadline_s=lock_deadline_s)
        _write_all(fd, data)
    finally:
        os.close(fd)


@contextlib.contextmanager
def locked(path: str | os.PathLike[str], *, deadline_s: float = 30.0) -> Iterator[None]:
    """An exclusive lock on `<folder>/.<name>.lock` (created 0600, never through a link) for a read-modify-write
    of `path`, taken with a deadline (LockTimeoutError)."""
    target = Path(os.path.abspath(path))
    make_private_dirs(target.parent)
    folder_fd = open_dir(target.parent)
    try:
        fd = os.open(f".{target.name}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK,
                     0o600, dir_fd=folder_fd)
    finally:
        os.close(folder_fd)
    try:
        lock(fd, target, deadline_s=deadline_s)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def rename(source: str | os.PathLike[str], target: str | os.PathLike[str]) -> None:
    """Rename within or across folders of the user's, each reached by a descriptor (no link on the way followed);
    a link at `target` is replaced, never written through."""
    src, dst = Path(os.path.abspath(source)), Path(os.path.abspath(target))
    src_fd = open_dir(src.parent)
    try:
        dst_fd = open_dir(dst.parent)
        try:
            os.replace(src.name, dst.name, src_dir_fd=src_fd, dst_dir_fd=dst_fd)
        finally:
            os.close(dst_fd)
    finally:
        os.close(src_fd)


def make_new_dir(path: str | os.PathLike[str], mode: int = 0o700) -> None:
    """mkdir of a folder that must be new (FileExistsError otherwise, a link there included), `mode` whatever the
    umask, made from its parent's descriptor."""
    target = Path(os.path.abspath(path))
    folder_fd = open_dir(target.parent)
    try:
        os.mkdir(target.name, mode, dir_fd=folder_fd)
        fd = os.open(target.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder_fd)
        try:
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
    finally:
        os.close(folder_fd)


def remove(path: str | os.PathLike[str]) -> bool:
    """Unlink one file (or link: the link itself) from its folder's descriptor; False when it was not there."""
    target = Path(os.path.abspath(path))
    try:
        folder_fd = open_dir(target.parent)
    except FileNotFoundError:
        return False
    try:
        os.unlink(target.name, dir_fd=folder_fd)
        return True
    except FileNotFoundError:
        return False
    finally:
        os.close(folder_fd)

