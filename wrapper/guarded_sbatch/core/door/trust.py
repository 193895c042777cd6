"""Who can write a file: its owner, the mode bits, the POSIX ACL (`system.posix_acl_access`: named users and
groups with write, limited by the mask) and every folder above it (a folder a co-worker can write lets him rename
the file, or the folder holding it, away and put his own in its place). The answer is a `Writers`: empty `others`
means only the owner (and root) can change what the path holds."""

from __future__ import annotations

import functools
import grp
import os
import pwd
import stat
import struct
from dataclasses import dataclass

ACL_XATTR = "system.posix_acl_access"
ACL_DEFAULT_XATTR = "system.posix_acl_default"
_USER_OBJ, _USER, _GROUP_OBJ, _GROUP, _MASK, _OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
_WRITE = 0x02


@dataclass(frozen=True)
class Writers:
    """Who besides the owner (and root) can change a file: one reason per way in, in words."""

    owner: int
    others: tuple[str, ...] = ()

    @property
    def only_owner(self) -> bool:
        return not self.others

    def why(self) -> str:
        return "; ".join(self.others)


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return f"gid {gid}"


@functools.lru_cache(maxsize=64)
def private_group(gid: int, uid: int) -> bool:
    """The user's own private group (same name as the user, no other member): its write bit gives nobody else
    anything."""
    try:
        group = grp.getgrgid(gid)
        user = pwd.getpwuid(uid)
    except KeyError:
        return False
    return group.gr_name == user.pw_name and user.pw_gid == gid and set(group.gr_mem) <= {user.pw_name}


def acl_entries(raw: bytes) -> list[tuple[int, int, int]]:
    """(tag, perm, id) of each entry of a `system.posix_acl_access` value (version 2, little-endian)."""
    if len(raw) < 4 or struct.unpack_from("<I", raw)[0] != 2:
        return []
    return [struct.unpack_from("<HHI", raw, offset) for offset in range(4, len(raw) - 7, 8)]


def acl_of(target: int | str) -> bytes:
    try:
        return os.getxattr(target, ACL_XATTR)
    except OSError:
        return b""  # no ACL (ENODATA), or a file system without them


def _acl_writers(entries: list[tuple[int, int, int]], owner: int, gid: int) -> list[str]:
    mask = next((perm for tag, perm, _ in entries if tag == _MASK), 0x07)
    found = []
    for tag, perm, ident in entries:
        if not perm & mask & _WRITE:
            continue
        if tag == _USER and ident != owner and ident != 0:
            found.append(f"writable by the user {user_name(ident)} through its ACL")
        elif tag == _GROUP and not private_group(ident, owner):
            found.append(f"writable by the group {group_name(ident)} through its ACL")
        elif tag == _GROUP_OBJ and not private_group(gid, owner):
            found.append(f"writable by its group {group_name(gid)} through its ACL")
    return found


def own_writers(label: str, info: os.stat_result, acl: bytes) -> list[str]:
    """Who besides the owner can write the object itself (mode bits, or its ACL when it has one)."""
    return [f"{label} is {what}" for what in _who(info, acl)]


def _who(info: os.stat_result, acl: bytes) -> list[str]:
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o002:
        return [f"writable by every user (mode {mode:04o})"]
    entries = acl_entries(acl)
    if len(entries) > 3:  # an extended ACL: the group bits show the mask, the entries say who
        return _acl_writers(entries, info.st_uid, info.st_gid)
    if mode & 0o020 and not private_group(info.st_gid, info.st_uid):
        return [f"writable by its group (mode {mode:04o})"]
    return []


def _folder_writers(folder: str, owner: int) -> list[str]:
    """Who besides `owner` can swap the file: its folder writable by others (mode bits or ACL, unless sticky), or
    a folder above it owned by another user (not root). A group-writable folder higher up lets a co-worker move
    only the owner's own folders around, never put his own files in (the readers refuse another user's file and
    link): that is named in docs/threat-model.md, not counted here, or no file in a shared project could ever be
    trusted."""
    found: list[str] = []
    current = folder
    first = True
    while True:
        try:
            info = os.stat(current)
        except OSError:
            break
        if info.st_uid not in (owner, 0):
            found.append(f"it lies under {current}, owned by {user_name(info.st_uid)}: the file can be swapped")
        elif first and not info.st_mode & stat.S_ISVTX:  # sticky (/tmp): only an entry's owner renames it
            found.extend(f"it lies in {current}, {what}: the file can be swapped"
                         for what in _who(info, acl_of(current)))
        first = False
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    return found


def default_acl_writers(folder: str | os.PathLike[str], owner: int) -> list[str]:
    """Who besides `owner` can write the files created in `folder`, through its default ACL (inherited by new
    files whatever the creator's umask)."""
    try:
        raw = os.getxattr(folder, ACL_DEFAULT_XATTR)
    except OSError:
        return []
    entries = acl_entries(raw)
    try:
        gid = os.stat(folder).st_gid
    except OSError:
        return []
    found = _acl_writers(entries, owner, gid) if len(entries) > 3 else []
    return [f"new files in {os.fspath(folder)} are {what}" for what in found]


def writers_of(path: str | os.PathLike[str], info: os.stat_result, fd: int | None = None) -> Writers:
    """Who besides the owner (and root) can change the file at `path`; `info` is its open descriptor's fstat and
    `fd` that descriptor (its ACL is read from it: no swap in between)."""
    label = os.fspath(path)
    acl = acl_of(fd if fd is not None else label)
    reasons = own_writers(label, info, acl)
    folder = os.path.dirname(os.path.abspath(label))
    reasons.extend(f"{label} {why[3:]}" for why in _folder_writers(folder, info.st_uid))  # "it lies in" -> the path
    return Writers(info.st_uid, tuple(dict.fromkeys(reasons)))
