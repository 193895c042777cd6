"""SlurmScheduler against the real dev Slurm (scripts/dev-slurm up)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from guarded_sbatch.core.errors import SchedulerError, UsageError
from guarded_sbatch.core.runner import run_command
from guarded_sbatch.scheduler.interface import JobState, SubmitRequest
from guarded_sbatch.scheduler.slurm import SlurmScheduler
from guarded_sbatch.scheduler.slurm_run import SlurmUnreachableError

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[1]
DEV_SLURM = REPO / "scripts" / "dev-slurm"


def wait_for(what: str, predicate: Callable[[], bool], timeout_s: float, every_s: float = 0.5) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(every_s)


def dev_slurm(*args: str) -> None:
    run_command([str(DEV_SLURM), *args], timeout=240)


def write_script(folder: Path, body: str, name: str = "job.sh") -> Path:
    script = folder / name
    script.write_text("#!/bin/bash\n" + body + "\n")
    script.chmod(0o755)
    return script


def scontrol_knows(job_id: str) -> bool:
    return run_command(["scontrol", "-o", "show", "job", job_id], timeout=30, check=False).returncode == 0


@pytest.fixture
def slurm(slurm_cluster: None, tmp_path: Path) -> SlurmScheduler:
    return SlurmScheduler(state_dir=tmp_path / "state", query_timeout_s=20)


@pytest.fixture
def cancel_later(slurm: SlurmScheduler) -> Iterator[list[str]]:
    """Job ids to scancel when the test ends, whatever happened."""
    job_ids: list[str] = []
    yield job_ids
    for job_id in job_ids:
        slurm.cancel(job_id)


def test_submit_state_info_cancel_round_trip(slurm: SlurmScheduler, tmp_path: Path, cancel_later: list[str]) -> None:
    script = write_script(tmp_path, "echo started\nsleep 120")
    name = f"roundtrip-{tmp_path.name}"
    request = SubmitRequest(
        script=script,
        sbatch_options=("--job-name", name, "--output", "logs/out-%j-%x.log", "--time=10"),
        workdir=tmp_path,
    )
    (tmp_path / "logs").mkdir()
    job_id = slurm.submit(request)
    cancel_later.append(job_id)
    assert job_id.isdigit()

    wait_for("the job to run", lambda: slurm.state(job_id) is JobState.RUNNING, 30)
    info = slurm.info(job_id)
    assert info.job_id == job_id
    assert info.state is JobState.RUNNING
    assert info.name == name
    assert info.owner == slurm.current_user()
    assert Path(info.work_dir) == tmp_path
    assert info.stdout_path == str(tmp_path / "logs" / f"out-{job_id}-{name}.log")  # %j and %x expanded
    assert info.time_limit_s == 600
    assert info.start_time is not None and abs(info.start_time - time.time()) < 120
    assert name in slurm.active_job_names()
    wait_for("the job's output", lambda: Path(info.stdout_path).is_file() and "started" in Path(info.stdout_path).read_text(), 20)

    slurm.cancel(job_id)
    wait_for("the job to be cancelled", lambda: slurm.state(job_id) is JobState.CANCELLED, 30)
    assert name not in slurm.active_job_names()
    ended = slurm.info(job_id)
    assert ended.state is JobState.CANCELLED and ended.end_time is not None
    slurm.cancel(job_id)  # cancelling an ended job is a no-op, not an error


def test_script_args_env_and_exit_code(slurm: SlurmScheduler, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A wandb.init in the submitting process (a notebook) leaves its service token; the job must not join it.
    monkeypatch.setenv("WANDB_SERVICE", "3-4242-unix-/tmp/wandb-service.sock")
    script = write_script(tmp_path, 'echo "args=$1,$2 flavour=$GUARDED_TEST_FLAVOUR service=${WANDB_SERVICE-unset}" '
                                    '> result.txt\nexit 3')
    request = SubmitRequest(
        script=script,
        sbatch_options=("--output=/dev/null",),
        script_args=("one", "two words"),
        env={"GUARDED_TEST_FLAVOUR": "mint"},
        workdir=tmp_path,
    )
    job_id = slurm.submit(request)
    wait_for("the job to fail", lambda: slurm.state(job_id) is JobState.FAILED, 30)
    assert (tmp_path / "result.txt").read_text().strip() == "args=one,two words flavour=mint service=unset"
    assert slurm.info(job_id).exit_code == 3


@pytest.mark.serial  # an idle node: jobs of other tests would move the estimate
def test_estimate_start_is_near_now_on_an_idle_node(slurm: SlurmScheduler, tmp_path: Path) -> None:
    request = SubmitRequest(script=write_script(tmp_path, "true"), sbatch_options=("--time=5",), workdir=tmp_path)
    start = slurm.estimate_start(request)
    assert start is not None
    assert time.time() - 60 < start < time.time() + 24 * 3600


def test_an_end_of_time_estimate_is_no_estimate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Behind running jobs without a time limit, sbatch --test-only answers with a start centuries away."""
    fake = tmp_path / "bin" / "sbatch"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'sbatch: Job 7 to start at 17902372802 using 1 processors on nodes localhost "
                    "in partition debug' >&2\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    request = SubmitRequest(script=write_script(tmp_path, "true"), workdir=tmp_path)
    assert SlurmScheduler(state_dir=tmp_path / "state").estimate_start(request) is None
    fake.write_text(f"#!/bin/sh\necho 'sbatch: Job 7 to start at {int(time.time()) + 600} using 1 processors' >&2\n")
    start = SlurmScheduler(state_dir=tmp_path / "state").estimate_start(request)
    assert start is not None and abs(start - (time.time() + 600)) < 60


def test_dependency_after_starts_child_only_once_parent_runs(
    slurm: SlurmScheduler, tmp_path: Path, cancel_later: list[str]
) -> None:
    sleeper = write_script(tmp_path, "sleep 120")
    parent = slurm.submit(SubmitRequest(script=sleeper, sbatch_options=("--hold", "--output=/dev/null"), workdir=tmp_path))
    cancel_later.append(parent)
    child = slurm.submit(
        SubmitRequest(
            script=sleeper,
            sbatch_options=("--output=/dev/null",),
            workdir=tmp_path,
            after=parent,
        )
    )
    cancel_later.append(child)

    time.sleep(3)  # long enough for the scheduler to have started the child if it were going to
    assert slurm.state(parent) is JobState.PENDING
    assert slurm.state(child) is JobState.PENDING
    assert slurm.info(child).reason == "Dependency"

    run_command(["scontrol", "release", parent], timeout=30)
    wait_for("the parent to run", lambda: slurm.state(parent) is JobState.RUNNING, 30)
    wait_for("the child to run", lambda: slurm.state(child) is JobState.RUNNING, 60)
    parent_start, child_start = slurm.info(parent).start_time, slurm.info(child).start_time
    assert parent_start is not None and child_start is not None and child_start >= parent_start


@pytest.mark.serial
def test_final_state_with_accounting_on_and_off_and_after_purge(slurm_cluster: None, tmp_path: Path) -> None:
    quick = write_script(tmp_path, "exit 0")
    failing = write_script(tmp_path, "exit 3", name="fail.sh")
    try:
        # Accounting on: a purged job is answered by sacct, even by a scheduler that never saw it.
        dev_slurm("up")
        watcher = SlurmScheduler(state_dir=tmp_path / "watcher")
        assert watcher.accounting_enabled()
        failed_id = watcher.submit(SubmitRequest(script=failing, sbatch_options=("--output=/dev/null",), workdir=tmp_path))
        wait_for("the job to leave slurmctld (MinJobAge)", lambda: not scontrol_knows(failed_id), 120, every_s=2)
        stranger = SlurmScheduler(state_dir=tmp_path / "stranger-1")
        assert stranger.state(failed_id) is JobState.FAILED
        from_sacct = stranger.info(failed_id)
        assert from_sacct.exit_code == 3 and Path(from_sacct.work_dir) == tmp_path

        # Accounting off: the final state seen while the job existed is remembered past the purge.
        dev_slurm("up", "--no-accounting")
        watcher = SlurmScheduler(state_dir=tmp_path / "watcher")
        assert not watcher.accounting_enabled()
        done_id = watcher.submit(SubmitRequest(script=quick, sbatch_options=("--output=/dev/null",), workdir=tmp_path))
        wait_for("the job to complete", lambda: watcher.state(done_id) is JobState.COMPLETED, 30)
        watcher.info(done_id)
        wait_for("the job to leave slurmctld (MinJobAge)", lambda: not scontrol_knows(done_id), 120, every_s=2)
        later = SlurmScheduler(state_dir=tmp_path / "watcher")  # a new process, same state folder
        assert later.state(done_id) is JobState.COMPLETED
        assert later.info(done_id).exit_code == 0
        # Nobody saw it end and there is no accounting: unknown, and never a made-up final state.
        stranger = SlurmScheduler(state_dir=tmp_path / "stranger-2")
        assert stranger.state(done_id) is JobState.UNKNOWN
        with pytest.raises(SchedulerError, match="no longer knows job"):
            stranger.info(done_id)
    finally:
        dev_slurm("up")  # leave the cluster in accounting mode for everyone else


def test_missing_script_is_bad_input(slurm: SlurmScheduler, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="not found"):
        slurm.submit(SubmitRequest(script=tmp_path / "nope.sh", workdir=tmp_path))


def test_rejected_option_carries_sbatch_message(slurm: SlurmScheduler, tmp_path: Path) -> None:
    script = write_script(tmp_path, "true")
    with pytest.raises(SchedulerError, match=r"sbatch rejected the job: .*[Ii]nvalid partition"):
        slurm.submit(SubmitRequest(script=script, sbatch_options=("--partition=no-such-partition",), workdir=tmp_path))
    with pytest.raises(SchedulerError, match=r"sbatch rejected the job: .*unrecognized option"):
        slurm.submit(SubmitRequest(script=script, sbatch_options=("--no-such-option",), workdir=tmp_path))
    with pytest.raises(SchedulerError, match=r"rejected the job: .*[Ii]nvalid partition"):
        slurm.estimate_start(SubmitRequest(script=script, sbatch_options=("-p", "no-such-partition"), workdir=tmp_path))


@pytest.mark.serial
def test_slurmctld_down_is_a_clear_error_and_unknown_state(slurm: SlurmScheduler, tmp_path: Path) -> None:
    script = write_script(tmp_path, "sleep 60")
    survivor = slurm.submit(SubmitRequest(script=script, sbatch_options=("--output=/dev/null",), workdir=tmp_path))
    quick = SlurmScheduler(state_dir=tmp_path / "state", query_timeout_s=15, submit_timeout_s=15)
    try:
        dev_slurm("stop-ctld")
        started = time.monotonic()
        with pytest.raises(SlurmUnreachableError, match=r"slurmctld is not answering: .*check `sinfo`"):
            quick.submit(SubmitRequest(script=script, workdir=tmp_path))
        assert time.monotonic() - started < 20  # bounded by the timeout, no hang
        started = time.monotonic()
        assert quick.state(survivor) is JobState.UNKNOWN  # never a terminal state while slurmctld is away
        assert time.monotonic() - started < 20
    finally:
        dev_slurm("start-ctld")
    # The controller's restart kept the job (StateSaveLocation).
    wait_for(
        "the job to be known again", lambda: slurm.state(survivor).is_active or slurm.state(survivor) is JobState.PENDING, 30
    )
    slurm.cancel(survivor)
    wait_for("the job to be cancelled", lambda: slurm.state(survivor) is JobState.CANCELLED, 30)
