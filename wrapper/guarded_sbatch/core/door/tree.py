"""Deletion that removes only what the plan saw: walk from the run root's folder descriptor, one component at a
time with O_NOFOLLOW, each opened folder's (st_dev, st_ino) compared with what was recorded when the plan was
made (and, for the submit folder, at launch); unlinkat/rmdir-at from descriptors below it, never following a
link (`rm -r LINK` removes the link), never crossing a mount point, another file system or another user's entry.
A root or parent swapped since the plan (a co-worker's `mv alice alice.old && ln -s ~alice alice`) is refused
and named."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path

from guarded_sbatch.core.door.trust import user_name

Identity = tuple[int, int]  # (st_dev, st_ino)
Refuse = Callable[[str], Exception]
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def identity(info: os.stat_result) -> Identity:
    return (info.st_dev, info.st_ino)


def _open_dir(name: str, dir_fd: int | None, recorded: Path, refuse: Refuse) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise refuse(f"{recorded}: a folder on the way became a symlink or a file: not deleted") from None
        raise


def plan_identities(root: Path, parts: tuple[str, ...], refuse: Refuse) -> tuple[Identity, ...]:
    """The identities of the root, each folder on the way and the target (lstat: a link's own), as they are now,
    reached from the root's descriptor without following a link; () when the target is not there."""
    found: list[Identity] = []
    fd = _open_dir(str(root), None, root, refuse)
    try:
        found.append(identity(os.fstat(fd)))
        for index, part in enumerate(parts):
            if index == len(parts) - 1:
                try:
                    found.append(identity(os.stat(part, dir_fd=fd, follow_symlinks=False)))
                except FileNotFoundError:
                    return ()
                break
            try:
                next_fd = _open_dir(part, fd, root / part, refuse)
            except FileNotFoundError:
                return ()
            os.close(fd)
            fd = next_fd
            found.append(identity(os.fstat(fd)))
    finally:
        os.close(fd)
    return tuple(found)


def _changed(where: Path, recorded: Path, seen: Identity, now: Identity, refuse: Refuse) -> Exception:
    return refuse(f"{recorded}: {where} changed since the plan: not the folder the plan saw (device/inode "
                  f"{seen[0]}:{seen[1]}, now {now[0]}:{now[1]}: renamed, or swapped for a link or another folder): "
                  "nothing deleted")


def delete_planned(root: Path, parts: tuple[str, ...], planned: tuple[Identity, ...], recorded: Path,
                   mounts: frozenset[Path], refuse: Refuse, *, link_only: bool = False) -> str:
    """Delete root/parts[...] when every folder from the root down (and the target) is still what the plan saw."""
    me = os.geteuid()
    fd = _open_dir(str(root), None, recorded, refuse)
    try:
        now = identity(os.fstat(fd))
        root_dev = now[0]
        if planned and now != planned[0]:
            raise _changed(root, recorded, planned[0], now, refuse)
        current = root
        for index, part in enumerate(parts[:-1], start=1):
            current = current / part
            if current in mounts:
                raise refuse(f"{current} is a mount point: not crossed, {recorded} not deleted")
            next_fd = _open_dir(part, fd, recorded, refuse)
            os.close(fd)
            fd = next_fd
            info = os.fstat(fd)
            if planned and identity(info) != planned[index]:
                raise _changed(current, recorded, planned[index], identity(info), refuse)
            if info.st_dev != root_dev:
                raise refuse(f"{current} is on another file system: not crossed, not deleted")
            if info.st_uid != me:
                raise refuse(f"{current} belongs to {user_name(info.st_uid)} since the plan: not crossed, {recorded} "
                             "not deleted")
        return _delete_entry(fd, parts[-1], root.joinpath(*parts), planned[-1] if planned else None, root_dev, mounts,
                             refuse, link_only)
    finally:
        os.close(fd)


def _delete_entry(parent_fd: int, name: str, path: Path, seen: Identity | None, root_dev: int,
                  mounts: frozenset[Path], refuse: Refuse, link_only: bool) -> str:
    try:
        info = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    except FileNotFoundError:
        return "already gone"
    if seen is not None and identity(info) != seen:
        raise refuse(f"{path} changed since the plan (replaced: device/inode {seen[0]}:{seen[1]}, now "
                     f"{info.st_dev}:{info.st_ino}): not deleted")
    if link_only:
        if not stat.S_ISLNK(info.st_mode):
            raise refuse(f"{path} changed since the plan (it is no symlink any more): not deleted")
        target = os.readlink(name, dir_fd=parent_fd)
        os.unlink(name, dir_fd=parent_fd)
        return f"symlink deleted (its target {target} left alone)"
    if stat.S_ISLNK(info.st_mode):
        raise refuse(f"{path} became a symlink since the plan: not deleted")
    if info.st_uid != os.geteuid():
        raise refuse(f"{path} belongs to {user_name(info.st_uid)} since the plan: not deleted")
    if not stat.S_ISDIR(info.st_mode):
        os.unlink(name, dir_fd=parent_fd)
        return "file deleted"
    kept = _delete_tree(parent_fd, name, path, root_dev, mounts, refuse)
    if kept:
        return f"folder emptied except {kept} mount point(s), other file system(s) or other users' entries left in place"
    return "folder deleted"


def _delete_tree(parent_fd: int, name: str, path: Path, root_dev: int, mounts: frozenset[Path], refuse: Refuse) -> int:
    """Delete folder `name` under parent_fd; returns how many entries were kept (mounts, other users', ...)."""
    if path in mounts:
        return 1
    fd = _open_dir(name, parent_fd, path, refuse)
    kept = 0
    try:
        opened = os.fstat(fd)
        if opened.st_dev != root_dev or opened.st_uid != os.geteuid():  # swapped since its stat
            return 1
        with os.scandir(fd) as entries:
            names = [entry.name for entry in entries]
        for child in names:
            try:
                info = os.stat(child, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if info.st_uid != os.geteuid():
                kept += 1  # another user's file or folder: theirs to delete
                continue
            if stat.S_ISDIR(info.st_mode):
                if info.st_dev != root_dev or (path / child) in mounts:
                    kept += 1
                    continue
                kept += _delete_tree(fd, child, path / child, root_dev, mounts, refuse)
            else:
                os.unlink(child, dir_fd=fd)  # files and symlinks: the link itself, never its target
    finally:
        os.close(fd)
    if kept:
        return kept
    os.rmdir(name, dir_fd=parent_fd)
    return 0
