"""File-system facts for the pre-flight: the mount type of a path, and stats that cannot hang the login node.

A stat on a hung NFS mount blocks in the kernel and cannot be interrupted; it runs in a daemon thread with a
deadline, so the caller moves on (the thread is abandoned and dies with the process).
"""

from __future__ import annotations

import os
import queue
import stat
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
import time

NETWORK_FILESYSTEMS = frozenset(
    {
        "nfs", "nfs4", "cifs", "smb3", "smbfs", "lustre", "gpfs", "beegfs", "fuse.sshfs", "sshfs", "ceph",
        "fuse.ceph", "ceph-fuse", "fuse.ceph-fuse", "glusterfs", "fuse.glusterfs", "afs", "panfs", "wekafs",
        "fuse.s3fs", "fuse.gcsfuse", "fuse.juicefs", "fuse.rclone", "9p", "orangefs", "pvfs2", "fuse.lizardfs",
        "fuse.moosefs", "quobyte", "fuse.quobyte", "fhgfs", "vastfs",
    }
)  # fmt: skip


@dataclass(frozen=True)
class Mount:
    mount_point: str
    fs_type: str
    source: str

    @property
    def is_network(self) -> bool:
        return self.fs_type in NETWORK_FILESYSTEMS or self.fs_type.startswith(("nfs", "fuse.sshfs"))


def _unescape(field: str) -> str:
    """Mount tables escape space, tab, newline and backslash as \\040 etc."""
    out: list[str] = []
    index = 0
    while index < len(field):
        if field[index] == "\\" and field[index + 1 : index + 4].isdigit():
            out.append(chr(int(field[index + 1 : index + 4], 8)))
            index += 4
        else:
            out.append(field[index])
            index += 1
    return "".join(out)


def parse_mount_table(text: str) -> list[Mount]:
    """Parse /proc/self/mountinfo (preferred) or /proc/mounts text."""
    mounts: list[Mount] = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 9 and "-" in fields[6:]:  # mountinfo: id parent dev root point opts [tags] - type source
            separator = fields.index("-", 6)
            fs_type = fields[separator + 1] if separator + 1 < len(fields) else ""
            source = fields[separator + 2] if separator + 2 < len(fields) else ""
            mounts.append(Mount(_unescape(fields[4]), fs_type, _unescape(source)))
        elif len(fields) >= 3:  # /proc/mounts: source mountpoint fstype opts dump pass
            mounts.append(Mount(_unescape(fields[1]), fields[2], _unescape(fields[0])))
    return mounts


def read_mount_table() -> list[Mount]:
    for candidate in ("/proc/self/mountinfo", "/proc/mounts"):
        try:
            return parse_mount_table(Path(candidate).read_text(errors="replace"))
        except OSError:
            continue
    return []


def mount_of(path: Path | str, mounts: Iterable[Mount] | None = None) -> Mount | None:
    """The mount holding `path` (longest mount-point prefix; the last mount wins on the same point).

    The path is made absolute without resolving symlinks, which would touch the (maybe hung) file system.
    """
    table = list(read_mount_table() if mounts is None else mounts)
    absolute = os.path.normpath(os.path.abspath(os.fspath(path)))
    best: Mount | None = None
    for mount in table:
        point = mount.mount_point.rstrip("/") or "/"
        inside = absolute == point or absolute.startswith(point + "/") or point == "/"
        if inside and (best is None or len(point) >= len(best.mount_point.rstrip("/") or "/")):
            best = mount
    return best


@dataclass(frozen=True)
class StatOutcome:
    path: Path
    exists: bool
    is_dir: bool = False
    timed_out: bool = False
    error: str = ""  # permission denied, ...
    resolved: Path | None = None  # the real path (symlinks followed) when it could be found in time


def timed_stat(
    path: Path, timeout_s: float, *, stat_function: Callable[[Path], os.stat_result] | None = None
) -> StatOutcome:
    """Stat `path` with a deadline; a hung mount gives timed_out=True instead of hanging the caller."""
    return timed_stats([path], timeout_s, stat_function=stat_function)[0]


def timed_stats(
    paths: list[Path], timeout_s: float, *, stat_function: Callable[[Path], os.stat_result] | None = None
) -> list[StatOutcome]:
    """Stat several paths in parallel threads, all under one deadline."""
    do_stat = stat_function or (lambda p: os.stat(p))
    answers: queue.Queue[tuple[int, StatOutcome]] = queue.Queue()

    def work(index: int, path: Path) -> None:
        try:
            result = do_stat(path)
            resolved: Path | None = None
            try:
                resolved = Path(os.path.realpath(path))
            except OSError:
                resolved = None
            answers.put((index, StatOutcome(path, True, stat.S_ISDIR(result.st_mode), resolved=resolved)))
        except FileNotFoundError:
            answers.put((index, StatOutcome(path, False)))
        except NotADirectoryError:
            answers.put((index, StatOutcome(path, False, error="a parent is not a folder")))
        except OSError as exc:
            answers.put((index, StatOutcome(path, False, error=exc.strerror or str(exc))))

    for index, path in enumerate(paths):
        threading.Thread(target=work, args=(index, path), daemon=True, name=f"stat-{index}").start()
    outcomes: dict[int, StatOutcome] = {}
    deadline = _now() + timeout_s
    while len(outcomes) < len(paths):
        remaining = deadline - _now()
        if remaining <= 0:
            break
        try:
            index, outcome = answers.get(timeout=remaining)
        except queue.Empty:
            break
        outcomes[index] = outcome
    return [outcomes.get(i, StatOutcome(p, False, timed_out=True)) for i, p in enumerate(paths)]


def _now() -> float:

    return time.monotonic()
