"""The guarded-sbatch marker, and the scheduler wrapper that adds it to every sbatch call of one launch, whatever its
front end (the CLI's launches and GuardedExecutor alike: launch/pipeline.py `guarded_scheduler`); the site's shim
reads it back (site/shim_decision.py).

A guarded job is submitted with `--comment=<user's comment> guarded-sbatch:preflight=<digest>` (its sidecar with
`guarded-sbatch:sidecar=<digest>`), where digest is the Adler-32 of the batch script's bytes as 8 hex digits. Slurm's
cli_filter (options["comment"], the script file from options.argv) and job_submit (job_desc.comment, job_desc.script)
both see it and recompute the digest in plain Lua 5.1 (Adler-32 needs only additions), so a marker copied onto another
script does not count. The user's own comment (from the command line, else from the script's #SBATCH lines) is kept in
front of the marker. It tells accidents from intent; it is not a secret (anyone can compute it).
"""

from __future__ import annotations

import re
import zlib
from dataclasses import replace
from pathlib import Path

from guarded_sbatch.core import door
from guarded_sbatch.sbatch.argv import ParsedOption, split_sbatch_argv
from guarded_sbatch.sbatch.script import parse_script_text
from guarded_sbatch.scheduler.delegating import DelegatingScheduler
from guarded_sbatch.scheduler.interface import Scheduler, SubmitRequest

MARKER_PREFIX = "guarded-sbatch"
PREFLIGHT = "preflight"
SIDECAR = "sidecar"
MARKER = re.compile(rf"(?:^|\s){MARKER_PREFIX}:(?P<kind>{PREFLIGHT}|{SIDECAR})=(?P<digest>[0-9a-f]{{8}})(?=\s|$)")

MAX_SCRIPT_BYTES = 16 << 20  # a batch script; the pre-flight read it already under its own cap


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


def user_comment(command_line: tuple[ParsedOption, ...], script_text: str, script_path: Path) -> str | None:
    """The comment sbatch would use: the last --comment on the command line, else the script's #SBATCH one."""
    for option in reversed(command_line):
        if option.name == "comment":
            return option.value

    directives = parse_script_text(script_text, script_path).directive_options
    return next((option.value for option in reversed(directives) if option.name == "comment"), None)


class MarkingScheduler(DelegatingScheduler):
    """A Scheduler that adds the marker to every sbatch call guarded-sbatch makes for one launch.

    The training script's submissions (the ETA check's --test-only and the real one) get the preflight
    marker, every other script (the sidecar) the sidecar marker. Everything else is the wrapped scheduler's.
    """

    def __init__(self, inner: Scheduler, training_script: Path, command_line: tuple[ParsedOption, ...]) -> None:
        super().__init__(inner)
        self._training_script = training_script.resolve()
        self._command_line = command_line

    def marked(self, request: SubmitRequest) -> SubmitRequest:
        script = request.script if request.script.is_absolute() else (request.workdir or Path.cwd()) / request.script
        raw = door.read(script, MAX_SCRIPT_BYTES).data
        if script.resolve() == self._training_script:
            kind, command_line = PREFLIGHT, self._command_line
        else:
            kind, command_line = SIDECAR, split_sbatch_argv([*request.sbatch_options, str(script)]).parsed_options
        comment = user_comment(command_line, raw.decode("utf-8", errors="replace"), script)
        return replace(request, comment=comment_with_marker(comment, kind, raw))

    def submit(self, request: SubmitRequest) -> str:
        return self.inner.submit(self.marked(request))

    def estimate_start(self, request: SubmitRequest) -> float | None:
        return self.inner.estimate_start(self.marked(request))


_: type[Scheduler] = MarkingScheduler
