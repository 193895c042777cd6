"""The EXIT `status` shows once Slurm has forgotten a job is its own sacct line's (the job/allocation line), never a
step's (`.batch`, `.extern`, `.0`); only the signal of a job killed by one comes from its `.batch` line, as scontrol
shows it while it knows the job. The sacct text is sacct 22.05's `-n -P -o` output for each case."""

from __future__ import annotations

import pytest

from guarded_sbatch.cli.lifecycle import sacct_exit
from guarded_sbatch.scheduler.slurm_queries import _SACCT_FIELDS
from guarded_sbatch.scheduler.slurm_parse import job_info_from_sacct, sacct_job_row


def _lines(job_id: str, exits: dict[str, str], state: str) -> str:
    """One line per id (the job's, then its steps'), with the ExitCode given for each."""
    out = []
    for suffix, code in exits.items():
        name, user, workdir, limit = ("a.sh", "root", "/tmp/arr", "00:02:00") if not suffix else (suffix[1:], "", "", "")
        out.append("|".join([f"{job_id}{suffix}", name, user, workdir, limit, "2026-12-06T06:31:16",
                             "2026-12-06T06:31:17", code, state]))
    return "\n".join(out) + "\n"


@pytest.mark.parametrize(("job_id", "exits", "state", "expected"), [
    # an array task whose function raised: the job's line says 1:0, its steps' lines need not
    ("793_1", {"": "1:0", ".batch": "0:0", ".extern": "0:0", ".0": "1:0"}, "FAILED", "1:0"),
    ("793_1", {"": "1:0", ".batch": "1:0"}, "FAILED", "1:0"),
    ("794", {"": "2:0", ".extern": "0:0", ".batch": "0:9"}, "FAILED", "2:0"),
    # a cancelled job: 0:0 on its own line, the SIGTERM on its batch step's, as scontrol said
    ("795", {"": "0:0", ".batch": "0:15", ".extern": "0:0"}, "CANCELLED by 0", "0:15"),
    ("796", {"": "0:0", ".batch": "0:0", ".extern": "0:0"}, "COMPLETED", "0:0"),
    ("797_0", {"": "0:0"}, "CANCELLED by 0", "0:0"),  # never ran: no batch step
])
def test_exit_is_the_jobs_own_line(job_id: str, exits: dict[str, str], state: str, expected: str) -> None:
    row = sacct_job_row(_lines(job_id, exits, state), job_id, _SACCT_FIELDS)
    assert row is not None and row["JobID"] == job_id
    assert sacct_exit(job_info_from_sacct(row).exit_code) == expected


def test_no_line_of_the_job_itself_is_none_never_a_steps_line() -> None:
    assert sacct_job_row(_lines("793_0", {"": "0:0", ".batch": "0:0"}, "COMPLETED"), "793_1", _SACCT_FIELDS) is None
    steps_only = _lines("798", {".batch": "1:0", ".extern": "0:0"}, "FAILED")
    assert sacct_job_row(steps_only, "798", _SACCT_FIELDS) is None
