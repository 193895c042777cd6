"""The sidecar's idle job-end step, which `sacct` lists as `guarded-sbatch-watch CANCELLED 0:15` under every
guarded job on Slurm, is explained in the user guide under the name it really has."""

from __future__ import annotations

from pathlib import Path

from guarded_sbatch.scheduler.slurm_watch import STEP_NAME

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "user-guide.md"


def test_the_user_guide_explains_the_watch_step_sacct_shows() -> None:
    text = GUIDE.read_text(encoding="utf-8")
    section = text.split(f"### The `{STEP_NAME}` step in `sacct`", 1)[1].split("\n### ", 1)[0]
    assert f"{STEP_NAME}  CANCELLED     0:15" in section  # as sacct prints it
    for why in ("It is the sidecar's", "the step ends\nwhen the job ends", "SIGTERM", "Neither is a failure",
                "`sacct -X`"):
        assert why in section, why
