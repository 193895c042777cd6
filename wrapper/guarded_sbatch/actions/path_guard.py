"""The path guard: what kill/restart may delete, and the deletion itself.

A path may be deleted only when it was recorded for that run and lies inside the configured run roots
(with no run roots configured: inside the run's submit folder). `/`, home folders (any user's), the run
root itself, `..` components and symlinks that lead out are refused. Deletion never follows a symlink:
the resolved path is checked again just before it is removed, and shutil.rmtree refuses a symlinked
folder at the top and unlinks (never follows) symlinks below it.
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from guarded_sbatch.core.errors import UsageError


class PathRefusedError(UsageError):
    """A path the guard will not delete; the message says why, in one line."""


@dataclass(frozen=True)
class GuardedPath:
    """A path the guard accepted: where it was recorded, what it resolves to, and the root it lies in."""

    recorded: Path  # absolute, normalised, as recorded for the run
    resolved: Path  # symlinks resolved
    root: Path  # the (resolved) run root it lies inside
    is_link: bool  # the recorded path itself is a symlink (to somewhere inside the root)


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
    (see allowed_roots); `base_dir` anchors relative paths (the run's submit folder).
    """
    text = os.fspath(path)
    if not text.strip():
        raise PathRefusedError("an empty path was recorded for this run: nothing deleted")
    if ".." in Path(text).parts:
        raise PathRefusedError(f"{text} contains a '..' component: refused, record the plain path instead")
    lexical = _lexical_absolute(text, base_dir)
    if lexical == Path(lexical.anchor):
        raise PathRefusedError(f"{text} is the file-system root: refused")
    recorded = set()
    for item in recorded_paths:
        if os.fspath(item).strip() and ".." not in Path(os.fspath(item)).parts:
            recorded.add(_lexical_absolute(os.fspath(item), base_dir))
    if lexical not in recorded:
        raise PathRefusedError(f"{text} was not recorded for this run: refused, the guard deletes only the run's own folders")
    if not roots:
        raise PathRefusedError(f"{text}: no run roots are configured and the run has no submit folder: refused")
    home_set = home_folders() if homes is None else homes
    resolved = Path(os.path.realpath(lexical))
    for candidate in (lexical, resolved):
        if candidate == Path(candidate.anchor):
            raise PathRefusedError(f"{text} resolves to the file-system root: refused")
        for home in home_set:
            if candidate == home or home.is_relative_to(candidate):
                raise PathRefusedError(f"{text} is (or holds) the home folder {home}: refused")
    lexical_roots = [Path(os.path.normpath(root)) for root in roots]
    resolved_roots = [Path(os.path.realpath(root)) for root in roots]
    for root in [*lexical_roots, *resolved_roots]:
        if lexical == root or resolved == root:
            raise PathRefusedError(f"{text} is the run root {root} itself: refused, only folders inside it are deleted")
        if root.is_relative_to(lexical) or root.is_relative_to(resolved):
            raise PathRefusedError(f"{text} holds the run root {root}: refused")
    if not any(_inside(lexical, root) for root in lexical_roots) and not any(
        _inside(lexical, root) for root in resolved_roots
    ):
        where = ", ".join(map(str, lexical_roots))
        raise PathRefusedError(f"{text} is outside the run roots ({where}): refused")
    root_of_resolved = next((root for root in resolved_roots if _inside(resolved, root)), None)
    if root_of_resolved is None:
        raise PathRefusedError(f"{text} is a symlink (or under one) that leads out of the run roots to {resolved}: refused")
    is_link = os.path.islink(lexical)
    return GuardedPath(recorded=lexical, resolved=resolved, root=root_of_resolved, is_link=is_link)


def delete_guarded(guarded: GuardedPath) -> str:
    """Delete an accepted path without following symlinks; return what was done, in a few words."""
    # Re-check at the last moment: the tree may have changed since the plan was made.
    now_resolved = Path(os.path.realpath(guarded.recorded))
    if now_resolved != guarded.resolved:
        raise PathRefusedError(f"{guarded.recorded} changed since the plan (now resolves to {now_resolved}): not deleted")
    try:
        info = os.lstat(guarded.resolved)
    except FileNotFoundError:
        return "already gone"
    if stat.S_ISLNK(info.st_mode):
        raise PathRefusedError(f"{guarded.resolved} became a symlink since the plan: not deleted")
    if stat.S_ISDIR(info.st_mode):
        shutil.rmtree(guarded.resolved)
        what = "folder deleted"
    else:
        os.unlink(guarded.resolved)
        what = "file deleted"
    if guarded.is_link and os.path.islink(guarded.recorded):
        os.unlink(guarded.recorded)  # the link itself lies inside a root (checked); its target is gone
        what += " (and the symlink to it)"
    return what
