"""The reference is fixed when chosen: the content of the pre-flight's reference config (every file that went into
it) is fingerprinted (sha256) and the fingerprint goes with the run (the config-diff check's details). A reference
another user can write (its mode bits, its ACL, its folder: core/door/trust.py) is named as such, and it can never
turn a block into a pass: its `[ok]` becomes a named warning, and when its content changed since the user's last
pre-flight fingerprinted it, the check fails naming both fingerprints. Naming it on purpose (--guard-reference)
accepts it as it is now."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from guarded_sbatch.core import door
from guarded_sbatch.core.fsutil import state_dir, update_json

MAX_REFERENCE_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class Pin:
    sha256: str  # of the reference's files, in order ("" when one could not be read)
    writers: str  # who besides the owner can write them ("" when nobody)
    changed_from: str = ""  # the fingerprint the user's last pre-flight saw, when it differs and others can write it


def pin_reference(files: tuple[Path, ...], *, given: bool) -> Pin:
    digest = hashlib.sha256()
    reasons: list[str] = []
    for path in files:
        try:
            found = door.read(path, MAX_REFERENCE_BYTES)
        except OSError:
            return Pin("", "")
        digest.update(str(path).encode() + b"\0" + found.data + b"\0")
        reasons.extend(found.writers.others)
    sha = digest.hexdigest()
    writers = "; ".join(dict.fromkeys(reasons))
    if not files:
        return Pin("", "")
    key = str(files[0].absolute())
    seen: dict[str, str] = {}

    def remember(data: dict[str, object]) -> None:
        before = data.get(key)
        seen["before"] = before if isinstance(before, str) else ""
        if given or not writers or not seen["before"]:
            data[key] = sha  # a reference only its owner writes (or one named on purpose) is pinned as it is now

    try:
        update_json(state_dir() / "references" / "fingerprints.json", remember)
    except OSError:
        pass  # the fingerprint still goes with the run
    before = seen.get("before", "")
    changed = before if writers and not given and before and before != sha else ""
    return Pin(sha, writers, changed)
