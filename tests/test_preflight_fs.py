"""The one mount table (core/mounts.py: mount types for the pre-flight, mount points for cleanup), and stats that
time out instead of hanging."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from guarded_sbatch.actions import path_guard
from guarded_sbatch.core.mounts import mount_of, mount_points, parse_mount_table, read_mount_table, unescape
from guarded_sbatch.launch.fsinfo import timed_stat, timed_stats

MOUNTINFO = r"""22 1 253:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw
25 22 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw
40 22 0:45 / /home rw,relatime shared:20 - nfs4 filer:/export/home rw,vers=4.2
41 22 0:46 / /scratch rw,relatime shared:21 master:3 - lustre 10.0.0.1@o2ib:/scratch rw,flock
42 41 0:47 / /scratch/local\040disk rw,relatime - xfs /dev/nvme0n1 rw
43 22 0:48 / /gpfs rw - gpfs fs1 rw
44 22 0:49 / /mnt/remote rw - fuse.sshfs user@host:/data rw
45 22 0:50 / /beegfs rw - beegfs beegfs_nodev rw
46 22 0:51 / /cifs rw - cifs //srv/share rw
"""

PROC_MOUNTS = """/dev/vda1 / ext4 rw,relatime 0 0
filer:/export/data /data nfs rw,vers=3 0 0
"""


def test_mountinfo_types_and_longest_prefix() -> None:
    mounts = parse_mount_table(MOUNTINFO)
    cases = {
        "/home/alice/coco": ("nfs4", True),
        "/scratch/alice/imagenet": ("lustre", True),
        "/scratch/local disk/cache": ("xfs", False),
        "/scratch/local diskette": ("lustre", True),
        "/gpfs/projects/x": ("gpfs", True),
        "/mnt/remote/data": ("fuse.sshfs", True),
        "/beegfs/x": ("beegfs", True),
        "/cifs/x": ("cifs", True),
        "/opt/data": ("ext4", False),
    }
    for path, (fs_type, network) in cases.items():
        mount = mount_of(path, mounts)
        assert mount is not None and (mount.fs_type, mount.is_network) == (fs_type, network), path


def test_proc_mounts_format_and_live_table() -> None:
    mount = mount_of("/data/coco", parse_mount_table(PROC_MOUNTS))
    assert mount is not None and mount.fs_type == "nfs" and mount.source == "filer:/export/data"
    live = mount_of("/proc/self", read_mount_table())
    assert live is not None and live.fs_type == "proc"


def test_relative_paths_are_made_absolute(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir("/")
    mount = mount_of("home/alice/data", parse_mount_table(MOUNTINFO))
    assert mount is not None and mount.fs_type == "nfs4"


def test_mount_points_are_the_same_table_cleanup_refuses_to_cross() -> None:
    points = mount_points(parse_mount_table(MOUNTINFO))
    assert Path("/scratch/local disk") in points and Path("/scratch/local\\040disk") not in points
    assert {Path("/"), Path("/proc"), Path("/home")} <= points
    assert mount_points(parse_mount_table(PROC_MOUNTS)) == {Path("/"), Path("/data")}
    live = mount_points()  # the live view path_guard reads: /proc is mounted on every Linux this runs on
    assert {Path("/"), Path("/proc")} <= live
    assert path_guard.mount_points is mount_points  # cleanup reads the one parser, not a copy of its own


def test_only_valid_octal_escapes_are_decoded() -> None:
    assert unescape(r"/a\040b\011c\134d") == "/a b\tc\\d"
    assert unescape(r"/odd\089\04") == r"/odd\089\04"  # not three octal digits: kept as written, never a crash


def test_timed_stat_real_files(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    exists, folder, missing = timed_stats([tmp_path / "f", tmp_path, tmp_path / "nope"], 5.0)
    assert exists.exists and not exists.is_dir
    assert folder.exists and folder.is_dir
    assert not missing.exists and not missing.timed_out


def test_hung_stat_times_out_instead_of_hanging(tmp_path: Path) -> None:
    release = threading.Event()

    def hung_stat(path: Path) -> os.stat_result:  # what a stat on a dead NFS server does: block
        release.wait(30)
        return os.stat(path)

    started = time.monotonic()
    outcome = timed_stat(tmp_path, 0.3, stat_function=hung_stat)
    elapsed = time.monotonic() - started
    release.set()
    assert outcome.timed_out and not outcome.exists
    assert elapsed < 2.0
