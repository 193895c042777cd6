"""The mount table, parsed once for everyone: the pre-flight asks which file system holds a path (a network one
is slow for data loaders), kill/restart cleanup asks where the mount points are (never crossed while deleting).

Read from /proc/self/mountinfo (this process's view, bind mounts included), else /proc/mounts; a table that
cannot be read is empty.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from guarded_sbatch.core import door

MOUNT_TABLES = ("/proc/self/mountinfo", "/proc/mounts")
NETWORK_FILESYSTEMS = frozenset(
    {
        "nfs", "nfs4", "cifs", "smb3", "smbfs", "lustre", "gpfs", "beegfs", "fuse.sshfs", "sshfs", "ceph",
        "fuse.ceph", "ceph-fuse", "fuse.ceph-fuse", "glusterfs", "fuse.glusterfs", "afs", "panfs", "wekafs",
        "fuse.s3fs", "fuse.gcsfuse", "fuse.juicefs", "fuse.rclone", "9p", "orangefs", "pvfs2", "fuse.lizardfs",
        "fuse.moosefs", "quobyte", "fuse.quobyte", "fhgfs", "vastfs",
    }
)
_ESCAPE = re.compile(r"\\([0-7]{3})")


@dataclass(frozen=True)
class Mount:
    mount_point: str
    fs_type: str
    source: str

    @property
    def is_network(self) -> bool:
        return self.fs_type in NETWORK_FILESYSTEMS or self.fs_type.startswith(("nfs", "fuse.sshfs"))


def unescape(field: str) -> str:
    """Mount tables write space, tab, newline and backslash as \\040, \\011, \\012, \\134."""
    return _ESCAPE.sub(lambda match: chr(int(match[1], 8)), field)


def parse_mount_table(text: str) -> list[Mount]:
    """Parse /proc/self/mountinfo (preferred) or /proc/mounts text."""
    mounts: list[Mount] = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 9 and "-" in fields[6:]:  # mountinfo: id parent dev root point opts [tags] - type source
            separator = fields.index("-", 6)
            fs_type = fields[separator + 1] if separator + 1 < len(fields) else ""
            source = fields[separator + 2] if separator + 2 < len(fields) else ""
            mounts.append(Mount(unescape(fields[4]), fs_type, unescape(source)))
        elif len(fields) >= 3:  # /proc/mounts: source mountpoint fstype opts dump pass
            mounts.append(Mount(unescape(fields[1]), fields[2], unescape(fields[0])))
    return mounts


def read_mount_table() -> list[Mount]:
    for candidate in MOUNT_TABLES:
        try:
            return parse_mount_table(door.read_proc(candidate).decode("utf-8", "replace"))
        except OSError:
            continue
    return []


def mount_points(mounts: Iterable[Mount] | None = None) -> frozenset[Path]:
    """Every mount point of this process's view (the live table unless one is given)."""
    return frozenset(Path(m.mount_point) for m in (read_mount_table() if mounts is None else mounts))


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
