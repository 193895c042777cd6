"""The marker that tells a guarded submission from an unguarded one (pure: shared by launch, site, cli).

A guarded job is submitted with `--comment=<user's comment> guarded-sbatch:preflight=<digest>` (its sidecar with
`guarded-sbatch:sidecar=<digest>`); digest is the Adler-32 of the batch script's bytes as 8 hex digits, which
the Lua plugins recompute. It tells accidents from intent; it is not a secret (anyone can compute it).
"""

from __future__ import annotations

import re
import zlib


MARKER_PREFIX = "guarded-sbatch"
PREFLIGHT = "preflight"
SIDECAR = "sidecar"
MARKER = re.compile(rf"(?:^|\s){MARKER_PREFIX}:(?P<kind>{PREFLIGHT}|{SIDECAR})=(?P<digest>[0-9a-f]{{8}})(?=\s|$)")


def script_digest(script: bytes) -> str:
    """Adler-32 of the script's bytes, 8 lowercase hex digits (what the lua plugins recompute)."""
    return f"{zlib.adler32(script) & 0xFFFFFFFF:08x}"


def marker_text(kind: str, script: bytes) -> str:
    if kind not in (PREFLIGHT, SIDECAR):
        raise ValueError(f"unknown marker kind {kind!r}")
    return f"{MARKER_PREFIX}:{kind}={script_digest(script)}"


def strip_marker(comment: str) -> str:
    return " ".join(MARKER.sub(" ", comment).split())


def comment_with_marker(user_comment: str | None, kind: str, script: bytes) -> str:
    """The user's comment (any old marker removed) followed by the marker for this script."""
    kept = strip_marker(user_comment or "")
    marker = marker_text(kind, script)
    return f"{kept} {marker}" if kept else marker


def marker_in(comment: str | None) -> tuple[str, str] | None:
    """(kind, digest) of the marker in a comment, or None."""
    match = MARKER.search(comment or "")
    return (match["kind"], match["digest"]) if match else None


def is_guarded(comment: str | None, script: bytes) -> bool:
    """True when the comment carries a marker whose digest is this script's."""
    found = marker_in(comment)
    return found is not None and found[1] == script_digest(script)
