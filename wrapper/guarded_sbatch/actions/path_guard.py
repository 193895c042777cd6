"""The path guard: what kill/restart may delete, and the deletion itself.

A path may be deleted only when it was recorded for that run and lies inside the configured run roots
(with no run roots configured: inside the submit folder pinned at launch, see registry.launch_root; the
record's own, editable submit_dir never widens this). `/`, home folders (any user's) and the hidden
folders directly in them, system folders (/etc, /usr, ...), the run root itself, `..` components and
symlinks that lead out are refused. Links are never followed (as `rm -r LINK`): a recorded path that is a
symlink inside the roots loses the link alone, a folder on the way that is a symlink is refused. Nothing owned
by another user is crossed (systemd-tmpfiles' "unsafe path transition": in a group-writable project folder a
co-worker can swap what they own into the run's path): such a folder on the way is refused, such an entry
inside the deleted tree is left in place and reported. The plan records the device and inode of the root,
each folder on the way and the target; deletion (core/door/tree.py) walks from the root's descriptor (openat with
O_NOFOLLOW, unlinkat) and refuses, naming it, whatever is not what the plan saw; it never crosses into another file
system or a (bind) mount point. A link another user made on the way to the root is refused at the plan.
"""

from __future__ import annotations

import os
import pwd
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from guarded_sbatch.core.door import tree
from guarded_sbatch.core.errors import UsageError
from guarded_sbatch.core.mounts import mount_points


class PathRefusedError(UsageError):
    """A path the guard will not delete; the message says why, in one line."""


@dataclass(frozen=True)
class GuardedPath:
    """A path the guard accepted: where it was recorded, what it resolves to, and the root it lies in."""

    recorded: Path  # absolute, normalised, as recorded for the run
    resolved: Path  # what is really deleted: the run root's own links resolved, nothing below it followed
    root: Path  # the (resolved) run root it lies inside
    is_link: bool  # the recorded path itself is a symlink: the link alone is deleted, never its target
    link_target: str = ""  # where that link points (left alone)
    identities: tuple[tuple[int, int], ...] = ()  # (st_dev, st_ino) of the root, each folder down and the target

    def describe(self) -> str:
        """What deleting it really does, for the plan."""
        if self.is_link:
            return f"delete the symlink {self.recorded} only (its target {self.link_target} is left alone)"
        if self.resolved != self.recorded:
            return f"delete {self.recorded} (really {self.resolved})"
        return f"delete {self.recorded}"


def home_folders() -> set[Path]:
    """Every user's home folder known to the system, plus $HOME and the current user's home."""
    homes: set[Path] = set()
    try:
        entries = pwd.getpwall()
    except OSError:
        entries = []
    for entry in entries:
        if entry.pw_dir and entry.pw_dir != "/":
            homes.add(Path(entry.pw_dir))
    for text in (os.environ.get("HOME"), os.path.expanduser("~")):
        if text and text != "/":
            homes.add(Path(text))
    resolved = {Path(os.path.realpath(home)) for home in homes}
    return homes | resolved


SYSTEM_FOLDERS = tuple(Path(p) for p in (
    "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/run", "/sbin", "/sys",
    "/usr", "/var/lib", "/var/log", "/var/spool", "/var/cache", "/var/run", "/snap",
))
# Never deleted or used as a root (they may hold them), but folders inside may be a configured root.
SYSTEM_PARENTS = tuple(Path(p) for p in ("/var", "/opt", "/srv", "/home", "/mnt", "/media", "/tmp", "/scratch"))


def system_refusal(path: Path) -> str:
    """Why `path` is a system location that is never deleted ("" when it is not)."""
    for folder in SYSTEM_FOLDERS:
        if path == folder or path.is_relative_to(folder) or folder.is_relative_to(path):
            return f"{path} is (or is inside, or holds) the system folder {folder}"
    if path in SYSTEM_PARENTS:
        return f"{path} is the system folder {path}"
    return ""


def allowed_roots(run_roots: Sequence[Path], submit_dir: str | os.PathLike[str] | None) -> tuple[Path, ...]:
    """The configured run roots, or the run's submit folder when none are configured."""
    if run_roots:
        return tuple(Path(root) for root in run_roots)
    if submit_dir:
        return (Path(submit_dir),)
    return ()


def _lexical_absolute(text: str, base: str | os.PathLike[str] | None) -> Path:
    path = Path(text)
    if not path.is_absolute():
        if not base:
            raise PathRefusedError(f"{text!r} is a relative path and the run has no submit folder to anchor it: not deleted")
        path = Path(base) / path
    return Path(os.path.normpath(path))


def _inside(path: Path, root: Path) -> bool:
    return path != root and path.is_relative_to(root)


def check_deletable(
    path: str | os.PathLike[str],
    *,
    recorded_paths: Iterable[str | os.PathLike[str]],
    roots: Sequence[Path],
    base_dir: str | os.PathLike[str] | None = None,
    homes: set[Path] | None = None,
) -> GuardedPath:
    """Accept `path` for deletion or raise PathRefusedError with a one-line reason.

    `recorded_paths` are the paths recorded for the run; `roots` the folders deletion is confined to
    (see allowed_roots); `base_dir` anchors relative paths (the run's submit folder) (registry.launch_root has
    checked it is still the folder recorded at launch, by device and inode). The refusals come in
    order: the text itself, not the run's, a protected place, an unacceptable root, the roots' own folders,
    outside the roots.
    """
    text = os.fspath(path)
    if not text.strip():
        raise PathRefusedError("an empty path was recorded for this run: nothing deleted")
    if ".." in Path(text).parts:
        raise PathRefusedError(f"{text} contains a '..' component: refused, record the plain path instead")
    lexical = _lexical_absolute(text, base_dir)
    if lexical == Path(lexical.anchor):
        raise PathRefusedError(f"{text} is the file-system root: refused")
    _refuse_unrecorded(text, lexical, recorded_paths, base_dir)
    if not roots:
        raise PathRefusedError(f"{text}: no run roots are configured and the run has no submit folder: refused")
    home_set = home_folders() if homes is None else homes
    resolved = Path(os.path.realpath(lexical))
    _refuse_protected(text, (lexical, resolved), home_set)
    _refuse_unacceptable_roots(text, roots)
    lexical_roots = [Path(os.path.normpath(root)) for root in roots]
    resolved_roots = [Path(os.path.realpath(root)) for root in roots]
    _refuse_root_folders(text, lexical, resolved, [*lexical_roots, *resolved_roots])
    if not any(_inside(lexical, root) for root in lexical_roots) and not any(
        _inside(lexical, root) for root in resolved_roots
    ):
        where = ", ".join(map(str, lexical_roots))
        raise PathRefusedError(f"{text} is outside the run roots ({where}): refused")
    root_of_resolved = next((root for root in resolved_roots if _inside(resolved, root)), None)
    if root_of_resolved is None:
        raise PathRefusedError(f"{text} is a symlink (or under one) that leads out of the run roots to {resolved}: refused")
    lexical_root = next(root for root in [*lexical_roots, *resolved_roots] if _inside(lexical, root))
    real_root = Path(os.path.realpath(lexical_root))
    real = real_root / lexical.relative_to(lexical_root)
    _refuse_foreign_links(text, lexical)
    is_link = _check_transitions(text, real_root, real)
    planned = tree.plan_identities(real_root, real.relative_to(real_root).parts, PathRefusedError)
    return GuardedPath(recorded=lexical, resolved=real, root=real_root, is_link=is_link,
                       link_target=os.readlink(real) if is_link else "", identities=planned)


def _refuse_foreign_links(text: str, lexical: Path) -> None:
    """Refuse a path reached through a link another user made (a co-worker's `alice -> ~alice` put in place of
    the shared folder): only root's and the user's own links are taken as the way to the run root."""
    me = os.geteuid()
    for ancestor in lexical.parents:  # the recorded path itself may be a link: only the link goes
        try:
            info = os.lstat(ancestor)
        except OSError:
            continue
        if stat.S_ISLNK(info.st_mode) and info.st_uid not in (0, me):
            raise PathRefusedError(f"{text}: the folder {ancestor} on the way is a symlink: refused (made by "
                                   f"{_owner_name(info.st_uid)}: swapped in by another user?), nothing deleted")


def _refuse_unrecorded(text: str, lexical: Path, recorded_paths: Iterable[str | os.PathLike[str]],
                       base_dir: str | os.PathLike[str] | None) -> None:
    """Refuse a path that is not one of the run's recorded paths (compared as plain absolute paths)."""
    recorded = set()
    for item in recorded_paths:
        if os.fspath(item).strip() and ".." not in Path(os.fspath(item)).parts:
            recorded.add(_lexical_absolute(os.fspath(item), base_dir))
    if lexical not in recorded:
        raise PathRefusedError(f"{text} was not recorded for this run: refused, the guard deletes only the run's own folders")


def _refuse_protected(text: str, candidates: tuple[Path, Path], homes: set[Path]) -> None:
    """Refuse a path that is (or resolves to) /, a system folder, a home folder or a home's hidden folder."""
    for candidate in candidates:
        if candidate == Path(candidate.anchor):
            raise PathRefusedError(f"{text} resolves to the file-system root: refused")
        why = system_refusal(candidate)
        if why:
            raise PathRefusedError(f"{text}: {why}: refused")
        for home in homes:
            if candidate == home or home.is_relative_to(candidate):
                raise PathRefusedError(f"{text} is (or holds) the home folder {home}: refused")
            if candidate.parent == home and candidate.name.startswith("."):
                raise PathRefusedError(f"{text} is the hidden folder {candidate.name} of the home {home}: refused")


def _refuse_unacceptable_roots(text: str, roots: Sequence[Path]) -> None:
    """Refuse every deletion while a run root is / or a system folder (as written or resolved)."""
    for root in roots:
        for candidate in (Path(os.path.normpath(root)), Path(os.path.realpath(root))):
            why = system_refusal(candidate) if candidate != Path(candidate.anchor) else f"{candidate} is /"
            if why:
                raise PathRefusedError(f"{text}: the run root is not acceptable ({why}): refused")


def _refuse_root_folders(text: str, lexical: Path, resolved: Path, roots: list[Path]) -> None:
    """Refuse a run root itself and any folder that holds one."""
    for root in roots:
        if lexical == root or resolved == root:
            raise PathRefusedError(f"{text} is the run root {root} itself: refused, only folders inside it are deleted")
        if root.is_relative_to(lexical) or root.is_relative_to(resolved):
            raise PathRefusedError(f"{text} holds the run root {root}: refused")


def _owner_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _check_transitions(text: str, root: Path, path: Path) -> bool:
    """Refuse a folder on the way from the root to `path` that is a symlink or owned by another user, and a
    `path` owned by another user; True when `path` itself is a symlink (only the link will go)."""
    me = os.geteuid()
    current = root
    parts = path.relative_to(root).parts
    for index, part in enumerate(parts):
        current = current / part
        try:
            info = os.lstat(current)
        except FileNotFoundError:
            return False  # nothing there (any more): nothing to delete
        last = index == len(parts) - 1
        if stat.S_ISLNK(info.st_mode):
            if last:
                return True
            raise PathRefusedError(f"{text}: the folder {current} on the way is a symlink: refused (links inside the run "
                                   "root are never followed)")
        if info.st_uid != me:
            raise PathRefusedError(f"{text}: {current} belongs to {_owner_name(info.st_uid)}, not you: refused (another "
                                   "user's folder is never crossed or deleted)")
    return False


def delete_guarded(guarded: GuardedPath) -> str:
    """Delete an accepted path from the run root's descriptor, only when the root, every folder on the way and the
    target are still the ones the plan saw (device and inode); never following a link or crossing a mount."""
    relative = guarded.resolved.relative_to(guarded.root).parts
    if not relative:
        raise PathRefusedError(f"{guarded.resolved} is the run root itself: not deleted")
    return tree.delete_planned(guarded.root, relative, guarded.identities, guarded.recorded, mount_points(),
                               PathRefusedError, link_only=guarded.is_link)
