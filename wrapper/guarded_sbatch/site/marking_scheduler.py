"""The guarded-sbatch marker on every sbatch call of a launch, as the site sees it (the wrapper that adds it is
launch/marking.py, re-exported here with the marker's helpers).

The marker itself is core/marker.py's: guarded-sbatch submits with
`--comment=<user's comment> guarded-sbatch:preflight=<digest>` (the sidecar with `guarded-sbatch:sidecar=<digest>`),
where digest is the Adler-32 of the batch script's bytes as 8 hex digits. Slurm's cli_filter (options["comment"],
the script file from options.argv) and job_submit (job_desc.comment, job_desc.script) both see it, and both can
recompute the digest in plain Lua 5.1 (Adler-32 needs only additions), so a marker copied onto another script does
not count. The user's own comment (from the command line, else from the script's #SBATCH lines) is kept in front
of the marker.
"""

from __future__ import annotations

from guarded_sbatch.core.marker import (
    MARKER,
    MARKER_PREFIX,
    PREFLIGHT,
    SIDECAR,
    comment_with_marker,
    is_guarded,
    marker_in,
    marker_text,
    script_digest,
    strip_marker,
)
from guarded_sbatch.launch.marking import MarkingScheduler, user_comment

__all__ = ["MARKER", "MARKER_PREFIX", "PREFLIGHT", "SIDECAR", "MarkingScheduler", "comment_with_marker", "is_guarded",
           "marker_in", "marker_text", "script_digest", "strip_marker", "user_comment"]
