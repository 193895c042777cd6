"""A file's weight is who can write it. The owner check (sources/files.py) says whose file it is; this says who
else can change what it holds: a file that is group- or world-writable (umask 002 makes every trainer output
0664), or that lies in a folder others may write without the sticky bit (they may rename it away or swap in
another of your files), can be written by a co-worker. Such a file is never the sole ground of a STOP or a
deletion (judge/source_state.py demotes the STOP to a WAIT naming the file, its mode and the fix).

The readers record here what they saw of each file they opened (`note_opened`) and the holes they skipped
(`note_hole`); the source set asks for the judged files' notes (`untrusted_note`, `damage_note`).
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field

from guarded_sbatch.core.door import trust

_MAX_FILES = 4096  # a watcher opens a bounded set of files; past this the oldest facts are forgotten
FIX = ("run the job with umask 022 or 077 (`umask 022` at the top of the job script, or in the shell you submit from: "
       "sbatch passes it on as SLURM_UMASK), or write the run's logs to a folder only you can write")


@dataclass
class FileFacts:
    writable_by_others: str = ""  # why others can write the file ("" when only its owner can)
    damage: list[str] = field(default_factory=list)  # holes skipped, zeros printed by a log command


_FACTS: dict[str, FileFacts] = {}


def _key(path: str | os.PathLike[str]) -> str:
    return os.path.abspath(os.fspath(path))


def _facts(path: str | os.PathLike[str]) -> FileFacts:
    key = _key(path)
    found = _FACTS.get(key)
    if found is None:
        if len(_FACTS) >= _MAX_FILES:
            _FACTS.pop(next(iter(_FACTS)))
        found = _FACTS[key] = FileFacts()
    return found


def writable_by_others(path: str | os.PathLike[str], info: os.stat_result, fd: int | None = None) -> str:
    """Why a user other than the file's owner (and root) can change the file at `path` ("" when none can): its
    mode bits, its ACL, the folders above it (core/door/trust.py). `info` is the open descriptor's fstat."""
    return trust.writers_of(path, info, fd).why()


_SCRIPT_UMASK = re.compile(r"^\s*umask\s+0*[0-7]?[2367][2367]\s*(?:[;#]|$)", re.MULTILINE)


def outputs_note(folder: str | os.PathLike[str], umask: int | None = None, script_text: str = "") -> str:
    """The pre-flight's warning when the run's files will be writable by others: new files in `folder` under this
    umask get write bits for a group that is not the user's own private one (or for everyone). "" when not, or
    when the job script sets a umask that keeps them its owner's (`umask 022`)."""
    if _SCRIPT_UMASK.search(script_text):
        return ""
    if umask is None:
        umask = os.umask(0o022)
        os.umask(umask)
    try:
        info = os.stat(folder)
    except OSError:
        return ""
    gid = info.st_gid if info.st_mode & stat.S_ISGID else os.getegid()
    uid = os.geteuid()
    acl = trust.default_acl_writers(folder, uid)
    if umask & 0o002 == 0:
        who = "every user"
    elif umask & 0o020 == 0 and not trust.private_group(gid, uid):
        who = f"the group {trust.group_name(gid)}"
    elif acl:
        return (f"{acl[0]} (the folder's default ACL, whatever the umask): a co-worker could write what the sidecar "
                "reads, so it will WAIT, not STOP, on them; write the run's logs to a folder without a default ACL "
                "(`getfacl`), or remove it (`setfacl -k`)")
    else:
        return ""
    return (f"the run's files will be writable by {who} (umask {umask:04o}): a co-worker could write what the sidecar "
            f"reads, so it will WAIT, not STOP, on them; {FIX}")


def note_opened(path: str | os.PathLike[str], writers: trust.Writers) -> None:
    """Remember who can write the file just opened (the door's answer for it)."""
    _facts(path).writable_by_others = writers.why()


def note_hole(path: str | os.PathLike[str], offset: int, length: int) -> None:
    note_damage(path, f"a hole of {_size(length)} at byte {offset} (never written; a `truncate`?)")


def note_damage(path: str | os.PathLike[str], what: str) -> None:
    damage = _facts(path).damage
    if what not in damage:
        damage[:] = [*damage, what][-8:]


def _known(paths: list[str]) -> list[tuple[str, FileFacts]]:
    return [(path, _FACTS[_key(path)]) for path in paths if not path.startswith(("command: ", "http")) and _key(path) in _FACTS]


def untrusted_note(paths: list[str]) -> str:
    """Why the judged files cannot bear a STOP alone ("" when only their owner can write them)."""
    reasons = [facts.writable_by_others for _, facts in _known(paths) if facts.writable_by_others]
    if not reasons:
        return ""
    more = f" (and {len(reasons) - 2} more)" if len(reasons) > 2 else ""
    return f"{'; '.join(reasons[:2])}{more}: a co-worker can write what is judged"


def damage_note(paths: list[str]) -> str:
    """The damage seen in the judged files ("" when none): holes, bytes no trainer writes (`truncate -s +8G`)."""
    found = [f"{path}: {what}" for path, facts in _known(paths) for what in facts.damage[:2]]
    return "; ".join(found[:3])


def _size(count: int) -> str:
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} bytes"
