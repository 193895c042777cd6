"""Bounded file access for every metric reader: regular files only, opened non-blocking, at most
`max_read_bytes` per read and `max_whole_file_bytes` for files read whole (CSV, trainer_state.json,
MLflow metric files). A FIFO, a device, a socket or a file of /proc or /sys named like a metric file (a metric
file swapped for a link to /dev/zero or /proc/self/mem) is a SourceError (the sidecar WAITs and says so), never
a hang and never a silent CONTINUE on the points read before; a missing file stays an OSError (readers treat it as
"not written yet"). A file owned by another uid than the reading process's (the sidecar runs as the job's user) is
a SourceError too: a co-worker's file in a shared folder is never this run's, and so is a link a co-worker made.
Who else can write each file opened is recorded (core/file_trust.py): such a file never bears a STOP alone.
Holes (a `truncate -s +8G`: bytes no trainer writes, that use no disk) are found with SEEK_DATA/SEEK_HOLE and
skipped, never read as 8 GB of zeros, and recorded as damage: a run whose files have holes is never called healthy.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import itertools
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from guarded_sbatch.core import door, file_trust
from guarded_sbatch.core.errors import GuardedError
from guarded_sbatch.sources.points import MetricPoint, sanitize_points
from guarded_sbatch.sources.base import SourceBase, SourceError

T = TypeVar("T", bound=SourceBase)  # a reader: sanitize_notes is declared on SourceBase

_MB = 1024 * 1024
OUT_OF_MEMORY = "too large to parse in memory"  # the sidecar alerts (sidecar_error) when a read says this


@dataclass
class ReadLimits:
    max_read_bytes: int = 16 * _MB  # per file per poll, for files read incrementally
    max_whole_file_bytes: int = 64 * _MB  # files that are re-read from the top


def _limits_from_env() -> ReadLimits:
    limits = ReadLimits()
    for name, attr in (("GUARDED_SBATCH_MAX_READ_MB", "max_read_bytes"),
                       ("GUARDED_SBATCH_MAX_FILE_MB", "max_whole_file_bytes")):
        text = os.environ.get(name, "")
        if text.isascii() and text.isdigit() and 0 < len(text) <= 6 and int(text) > 0:
            setattr(limits, attr, int(text) * _MB)
    return limits


LIMITS = _limits_from_env()


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a folder"
    return "not a regular file"


@functools.lru_cache(maxsize=1)
def _pseudo_devices() -> frozenset[int]:
    """The devices of /proc and /sys: their "regular" files (/proc/self/mem, /proc/kcore) are no metric files."""
    found = set()
    for folder in ("/proc", "/sys", "/proc/self"):
        try:
            found.add(os.stat(folder).st_dev)
        except OSError:
            continue
    return frozenset(found)


def _refuse_unless_metric_file(path: str | os.PathLike[str], info: os.stat_result) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise SourceError(f"{os.fspath(path)} is {_kind(info.st_mode)}, not a regular file: not read")
    if info.st_dev in _pseudo_devices():
        raise SourceError(f"{os.fspath(path)} is a file of /proc or /sys (a swapped-in link?), not a metric file: not read")


def check_regular(path: str | os.PathLike[str]) -> os.stat_result:
    """stat(path) when it is a regular file; SourceError when it is something else; OSError when missing."""
    link = os.lstat(path)
    if stat.S_ISLNK(link.st_mode) and link.st_uid not in (expected_owner(), 0):
        raise SourceError(f"{os.fspath(path)} is a link made by {_user(link.st_uid)}, not by the job's user: not read")
    with _opened(path) as file:
        return file.info  # readers that open it themselves (SQLite) are weighed too


@contextlib.contextmanager
def _opened(path: str | os.PathLike[str]) -> Iterator[door.Opened]:
    """The door's descriptor of a regular metric file of the job's user; its writers are noted for the judge."""
    try:
        with door.opened(path) as file:
            _refuse_unless_metric_file(path, file.info)
            check_owner(path, file.info)
            file_trust.note_opened(path, file.writers)
            yield file
    except (door.NotRegularError, IsADirectoryError):
        raise SourceError(f"{os.fspath(path)} is {_kind(os.stat(path).st_mode)}, not a regular file: not read") from None


def open_regular(path: str | os.PathLike[str]) -> int:
    """A read-only descriptor of a regular file (a duplicate of the door's: the caller closes it). Checked on the
    descriptor (the path may be swapped in between); O_NONBLOCK so a FIFO cannot block."""
    with _opened(path) as file:
        return os.dup(file.fd)


def expected_owner() -> int:
    return os.geteuid()


def check_owner(path: str | os.PathLike[str], info: os.stat_result) -> None:
    """SourceError when another user owns the file (checked on the open descriptor: no swap in between)."""
    expected = expected_owner()
    if info.st_uid != expected:
        raise SourceError(f"{os.fspath(path)} is owned by {_user(info.st_uid)}, not by the job's user "
                          f"({_user(expected)}): another user's file is never read as this run's")


def _user(uid: int) -> str:
    try:
        import pwd  # noqa: PLC0415 - only for naming a refused file's owner

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (KeyError, ImportError):
        return f"uid {uid}"


def listing(folder: str | os.PathLike[str], limit: int) -> tuple[list[os.DirEntry[str]], bool]:
    """At most `limit` entries of `folder`, and whether it holds more: a folder of a million names (a co-worker's,
    or a run's checkpoints) costs its first `limit`, never all of them; an unreadable folder is empty."""
    try:
        with os.scandir(folder) as entries:
            taken = list(itertools.islice(entries, max(limit, 0) + 1))
    except OSError:
        return [], False
    return taken[:limit], len(taken) > limit


def read_range(path: str | os.PathLike[str], offset: int, max_bytes: int | None = None) -> tuple[bytes, int]:
    """(bytes from `offset`, at most max_bytes (default: the per-poll cap), the file's size now)."""
    cap = LIMITS.max_read_bytes if max_bytes is None else max(0, min(max_bytes, LIMITS.max_read_bytes))
    fd = open_regular(path)
    try:
        size = os.fstat(fd).st_size
        if offset >= size:
            return b"", size
        return door.pread_all(fd, max(0, offset), min(cap, size - offset)), size
    finally:
        os.close(fd)


def data_extent(fd: int, offset: int, size: int, path: str | os.PathLike[str] = "") -> tuple[int, int]:
    """(start, end) of the written bytes at or after `offset`, up to the next hole: a hole before them is skipped
    (and recorded as damage against `path`); (size, size) when only a hole is left. A file system without
    SEEK_DATA has no holes to find: (offset, size)."""
    if offset >= size:
        return offset, offset
    try:
        start = os.lseek(fd, offset, os.SEEK_DATA)
    except OSError as exc:
        if exc.errno != errno.ENXIO:
            return offset, size
        start = size  # a hole up to the end
    if start > offset and path:
        file_trust.note_hole(path, offset, start - offset)
    if start >= size:
        return size, size
    try:
        end = os.lseek(fd, start, os.SEEK_HOLE)
    except OSError:
        end = size
    return start, max(start, min(end, size))


@dataclass(frozen=True)
class Chunk:
    start: int  # where `data` begins: past `offset` when a hole was skipped
    data: bytes
    size: int  # the file's size now

    @property
    def end(self) -> int:
        return self.start + len(self.data)


def read_data(path: str | os.PathLike[str], offset: int, max_bytes: int | None = None) -> Chunk:
    """At most max_bytes (capped by the per-poll cap) of written bytes from `offset`: a hole is skipped, never
    read (Chunk.start says where the bytes begin), and the read stops where the next hole begins."""
    cap = LIMITS.max_read_bytes if max_bytes is None else max(0, min(max_bytes, LIMITS.max_read_bytes))
    fd = open_regular(path)
    try:
        size = os.fstat(fd).st_size
        start, end = data_extent(fd, max(0, offset), size, path)
        return Chunk(start, door.pread_all(fd, start, min(cap, end - start)), size)
    finally:
        os.close(fd)


def read_whole(path: str | os.PathLike[str], max_bytes: int | None = None) -> bytes:
    """The whole file, when it is no larger than the cap; SourceError when it is."""
    cap = LIMITS.max_whole_file_bytes if max_bytes is None else max_bytes
    fd = open_regular(path)
    try:
        size = os.fstat(fd).st_size
        if size > cap:
            raise SourceError(f"{os.fspath(path)} is {size / _MB:.1f} MB, over the {cap / _MB:.0f} MB cap for files "
                              "read whole (GUARDED_SBATCH_MAX_FILE_MB): not read")
        data = door.pread_all(fd, 0, cap + 1)
        if len(data) > cap:
            raise SourceError(f"{os.fspath(path)} grew past the {cap / _MB:.0f} MB cap while read: not read")
        return data
    finally:
        os.close(fd)


def guarded_reader(cls: type[T]) -> type[T]:
    """Class decorator for a reader: whatever its read_new() throws becomes one SourceError naming the
    source and the error, and the points it yields are sanitised (steps outside int64 dropped, values
    beyond float range made ±inf), with the notes kept in `sanitize_notes`."""
    inner: Callable[..., list[MetricPoint]] = cls.read_new

    @functools.wraps(inner)
    def read_new(self: SourceBase, *args: Any, **kwargs: Any) -> list[MetricPoint]:
        try:
            points = inner(self, *args, **kwargs)
        except SourceError:
            raise
        except FileNotFoundError as exc:
            error = SourceError(f"{_label(self)}: {exc}")
            error.missing = True  # not there yet (a start-up race), unlike a file that cannot be read
            raise error from None
        except (GuardedError, OSError) as exc:
            raise SourceError(f"{_label(self)}: {exc}") from None
        except RecursionError:
            raise SourceError(f"{_label(self)}: nested too deeply to parse; skipped") from None
        except MemoryError:
            raise SourceError(f"{_label(self)}: {OUT_OF_MEMORY}; skipped") from None
        except Exception as exc:  # noqa: BLE001 - a malformed file must never kill the sidecar
            raise SourceError(f"{_label(self)}: unreadable data ({type(exc).__name__}: {str(exc)[:200]})") from None
        kept, notes = sanitize_points(points)
        if notes:
            self.sanitize_notes = [*self.sanitize_notes, *notes][-20:]
        return kept

    cls.read_new = read_new  # type: ignore[method-assign]
    cls.points_sanitized = True  # SourceSet need not check them again
    return cls


def _label(source: Any) -> str:
    try:
        return str(source.describe())[:300]
    except Exception:  # noqa: BLE001 - describing a broken source must not fail too
        return type(source).__name__
