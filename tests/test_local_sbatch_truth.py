"""The local backend is true to sbatch where a user can tell: an output file is truncated (or appended with
--open-mode=append), job ids are not reused by a fresh state folder nor land on an old output file, a cancelled
job reports sacct's exit code (read off the dev Slurm: `0:0` for the job; its batch step's `0:15` is not what
sacct -X or `status` shows), and the job's output is never written through a link or into a FIFO planted where
it will be (issue 35: `slurm-<next id>.out -> ~victim/.bashrc`)."""

from __future__ import annotations

import os
import time
import subprocess
from pathlib import Path

import pytest
from e2e_helpers import wait_for
from guarded_sbatch.cli.lifecycle import sacct_exit
from guarded_sbatch.core.errors import SchedulerError, UsageError
from guarded_sbatch.scheduler.interface import JobState, SubmitRequest
from guarded_sbatch.scheduler.local import LocalScheduler
from guarded_sbatch.scheduler.local_ids import peek_next_id, take_free_ids, take_ids


@pytest.fixture(autouse=True)
def _own_id_sequence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))


def _script(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/bash\n{body}\n")
    return script


def _run(scheduler: LocalScheduler, script: Path, *options: str) -> str:
    job_id = scheduler.submit(SubmitRequest(script=script, sbatch_options=options, workdir=script.parent))
    assert wait_for(lambda: scheduler.state(job_id).is_terminal, 30, 0.1, f"job {job_id} to end")
    return job_id


def test_an_existing_output_file_is_truncated_and_appended_to_only_when_asked(tmp_path: Path) -> None:
    scheduler = LocalScheduler(tmp_path / "jobs")
    script = _script(tmp_path, "echo new")
    (tmp_path / "train.out").write_text("old run: ModuleNotFoundError\n" * 100)
    _run(scheduler, script, "--output=train.out")
    assert (tmp_path / "train.out").read_text() == "new\n"
    _run(scheduler, script, "--output=train.out", "--open-mode=append")
    assert (tmp_path / "train.out").read_text() == "new\nnew\n"


def test_a_fresh_state_folder_does_not_restart_the_ids_nor_reuse_an_old_output(tmp_path: Path) -> None:
    script = _script(tmp_path, 'echo "job $SLURM_JOB_ID"')
    first = LocalScheduler(tmp_path / "state-a" / "jobs")
    old = _run(first, script)
    fresh = LocalScheduler(tmp_path / "state-b" / "jobs")
    assert peek_next_id(fresh.root) == int(old) + 1
    stale = tmp_path / f"slurm-{int(old) + 1}.out"
    stale.write_text("a run from another machine's sequence\n")
    new = _run(fresh, script)
    assert int(new) > int(old) + 1  # the id whose output exists was skipped
    assert stale.read_text() == "a run from another machine's sequence\n"
    assert (tmp_path / f"slurm-{new}.out").read_text() == f"job {new}\n"
    assert (tmp_path / f"slurm-{old}.out").read_text() == f"job {old}\n"


def test_a_planted_link_at_the_next_output_is_never_written_through(tmp_path: Path) -> None:
    """The attack of issue 35: the co-worker guesses the next id. The id is skipped; a link at a fixed output
    name is refused at submission, one clear line, and nothing is written to its target."""
    scheduler = LocalScheduler(tmp_path / "jobs")
    bashrc = tmp_path / "victim-bashrc"
    bashrc.write_text("# victim's shell start-up\n")
    script = _script(tmp_path, "echo '{loss:: 1.0}'")
    guessed = peek_next_id(scheduler.root)
    (tmp_path / f"slurm-{guessed}.out").symlink_to(bashrc)
    job_id = _run(scheduler, script)
    assert job_id != str(guessed) and scheduler.state(job_id) is JobState.COMPLETED
    (tmp_path / "train.out").symlink_to(bashrc)
    with pytest.raises(UsageError, match="train.out is a symbolic link"):
        scheduler.submit(SubmitRequest(script=script, sbatch_options=("--output=train.out",), workdir=tmp_path))
    assert bashrc.read_text() == "# victim's shell start-up\n"


@pytest.mark.parametrize("plant", ["link", "fifo", "dangling"])
def test_a_link_or_fifo_planted_while_the_job_waits_fails_it_with_a_clear_line(tmp_path: Path, plant: str) -> None:
    """Planted after the submission (the job waits on its dependency): the job FAILS when it starts, says why,
    writes nothing through the link and does not hang on the FIFO."""
    scheduler = LocalScheduler(tmp_path / "jobs")
    bashrc = tmp_path / "victim-bashrc"
    bashrc.write_text("# victim's shell start-up\n")
    held = scheduler.submit(SubmitRequest(script=_script(tmp_path, "sleep 60"), workdir=tmp_path,
                                          sbatch_options=("--array=0-1%1", "--output=/dev/null")))
    (tmp_path / "late.sh").write_text("#!/bin/bash\necho written\n")
    job_id = scheduler.submit(SubmitRequest(script=tmp_path / "late.sh", workdir=tmp_path,  # waits for task 1
                                            sbatch_options=(f"--dependency=after:{held}_1", "--output=late.out")))
    target = tmp_path / "late.out"
    if plant == "fifo":
        os.mkfifo(target)
    else:
        target.symlink_to(bashrc if plant == "link" else tmp_path / "nowhere")
    assert scheduler.state(job_id) is JobState.PENDING
    scheduler.cancel(f"{held}_0")  # task 1 takes its slot, and the job waiting for it starts
    assert wait_for(lambda: scheduler.state(job_id).is_terminal, 30, 0.1, "the planted job to end")
    info = scheduler.info(job_id)
    expected = "a FIFO" if plant == "fifo" else "a symbolic link"
    assert info.state is JobState.FAILED and f"late.out is {expected}" in info.reason, info
    assert bashrc.read_text() == "# victim's shell start-up\n" and not (tmp_path / "nowhere").exists()
    scheduler.cancel(held)


def test_an_output_file_of_another_name_or_owner_is_refused(tmp_path: Path) -> None:
    scheduler = LocalScheduler(tmp_path / "jobs")
    script = _script(tmp_path, "echo hi")
    (tmp_path / "mine.txt").write_text("keep\n")
    os.link(tmp_path / "mine.txt", tmp_path / "linked.out")
    with pytest.raises(UsageError, match="hard link"):
        scheduler.submit(SubmitRequest(script=script, sbatch_options=("-o", "linked.out"), workdir=tmp_path))
    # a folder not there yet is sbatch's case too (submitit makes logs/<id> after submitting): the job fails at its
    # start if it is still missing, as Slurm's does (FAILED 0:53), and nothing is created for it
    job = scheduler.submit(SubmitRequest(script=script, sbatch_options=("-o", "missing/x.out"), workdir=tmp_path))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not scheduler.state(job).is_terminal:
        time.sleep(0.2)
    assert scheduler.state(job) is JobState.FAILED and not (tmp_path / "missing").exists()
    assert (tmp_path / "mine.txt").read_text() == "keep\n"


@pytest.mark.parametrize("backend", ["local", pytest.param("slurm", marks=pytest.mark.slurm)])
def test_a_cancelled_job_reports_the_exit_code_slurm_reports(tmp_path: Path, backend: str,
                                                            request: pytest.FixtureRequest) -> None:
    """Read off the dev Slurm 22.05 for a scancel'd `sleep`: scontrol `ExitCode=0:15`, sacct `0:15` on the
    `.batch` line (the job's own line says 0:0): the batch script's wait status, which the local backend reports."""
    # `exec`: a shell waiting on `sleep` races it to the SIGTERM and exits 143:0 or dies 0:15, as it happens to
    script = _script(tmp_path, "set -euo pipefail\nexec sleep 120")
    if backend == "slurm":
        request.getfixturevalue("slurm_cluster")
        from guarded_sbatch.scheduler.slurm import SlurmScheduler

        scheduler = SlurmScheduler(state_dir=tmp_path / ".slurm-cache")
    else:
        scheduler = LocalScheduler(tmp_path / "jobs")  # type: ignore[assignment]
    job_id = scheduler.submit(SubmitRequest(script=script, sbatch_options=("--output=/dev/null",), workdir=tmp_path))
    assert wait_for(lambda: scheduler.state(job_id) is JobState.RUNNING, 60, 0.2, "the job to start")
    scheduler.cancel(job_id)
    assert wait_for(lambda: scheduler.state(job_id).is_terminal, 60, 0.2, "the job to end")
    info = wait_for(lambda: (i := scheduler.info(job_id)).exit_code is not None and i, 30, 0.5, "its exit code")
    assert info.state is JobState.CANCELLED and sacct_exit(info.exit_code) == "0:15", info
    if backend == "slurm":
        def batch_line() -> str | None:
            sacct = subprocess.run(["sacct", "-j", job_id, "-n", "-P", "-o", "JobID,ExitCode"], capture_output=True,
                                   text=True, timeout=30)
            found = dict(line.split("|", 1) for line in sacct.stdout.split() if "|" in line)
            return found.get(f"{job_id}.batch")
        written = wait_for(batch_line, 30, 1, "slurmdbd to record the batch step") if _accounting() else "0:15"
        assert written == "0:15"


def _accounting() -> bool:
    config = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=30).stdout
    return "accounting_storage/none" not in config


def test_ids_that_always_collide_are_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(SchedulerError, match="every job id tried would write over an existing file"):
        take_free_ids(tmp_path / "jobs", 1, lambda first: f"slurm-{first}.out")


def test_without_a_usable_state_home_the_folder_counts_on_its_own(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    monkeypatch.setenv("XDG_STATE_HOME", str(blocked))  # the per-user counter cannot be made under a file
    root = tmp_path / "jobs"
    assert [take_ids(root, 1), take_ids(root, 3), take_ids(root, 1)] == [1, 2, 5]
