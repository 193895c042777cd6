"""Shared fixtures. A test that needs Slurm fails under CI=true when the cluster is missing."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# A suite started where SIGINT is ignored (scripts/test's side streams run in the background of a script, so do
# nohup'd and some CI runs) would hand that to every process a test starts; the tests that interrupt their own
# processes (a Ctrl-C'd launch, a stop's SIGINT) need it to act as at a terminal. A handled signal is reset to
# its default in each child.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# The suite's environment is the users' environment of its runs (scripts/test puts it first on PATH, as an activated
# venv is): `.venv/bin/python -m pytest` alone gets the same, so the pre-flight's interpreter check finds the
# `python`/`torchrun` the test jobs run.
if os.environ.get("PATH", "").split(":")[0] != str(Path(sys.executable).parent):
    os.environ["PATH"] = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"


# Every trainer the suite runs (its jobs inherit this environment) uses one thread per library, as a Slurm job of
# --cpus-per-task=1 should: torch's OpenMP pool otherwise spins on cores the other tests need, a third of a tiny
# trainer's CPU on this 2-core machine. The guard reads what the trainers write; their threading is not its subject.
for _threads in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_threads, "1")


def _slurm_up() -> tuple[bool, str]:
    if shutil.which("sinfo") is None:
        return False, "sinfo not found (run scripts/dev-slurm up)"
    try:
        out = subprocess.run(
            ["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=15
        )
    except subprocess.TimeoutExpired:
        return False, "sinfo timed out"
    if out.returncode != 0:
        return False, f"sinfo failed: {out.stderr.strip()}"
    states = out.stdout.split()
    if not any(s.rstrip("*~#!%$@^-+").startswith(("idle", "mix", "alloc", "comp", "planned")) for s in states):
        return False, f"no usable node (states: {states})"
    return True, ""


# scripts/test's side stream: its worker N (gwN) runs its tests on the Nth side cluster; the environment that
# addresses it (SLURM_CONF, DEV_SLURM_*) is set before any test module is imported, so every Slurm command and
# scripts/dev-slurm call of those tests goes there.
_SIDE_CLUSTERS = os.environ.get("GUARDED_TEST_SIDE_CLUSTERS", "")
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if _SIDE_CLUSTERS and _WORKER.startswith("gw"):
    _clusters = _SIDE_CLUSTERS.split(";")
    if int(_WORKER[2:]) >= len(_clusters):
        raise pytest.UsageError(f"GUARDED_TEST_SIDE_CLUSTERS names {len(_clusters)} clusters, one per side worker: "
                                f"run with -n {len(_clusters)}")
    os.environ.update(pair.split("=", 1) for pair in _clusters[int(_WORKER[2:])].split())

# The files that take longest (minutes of waiting on Slurm and trainers), longest first. scripts/test hands files to
# its workers in collection order (--no-loadscope-reorder), so these start at once and the quick files fill in
# around them; left to xdist's default (most tests first), they came last and the run ended on one of them.
SLOWEST_FILES = (
    "test_hydra_sweep.py", "test_e2e_frameworks_local.py", "test_corpus_dense.py", "test_e2e_identity_slurm.py",
    "test_e2e_identity_local.py", "test_judge_incremental.py", "test_multinode_training.py", "test_corpus_sources.py",
    "test_e2e_frameworks_slurm.py", "test_light_install.py", "test_first_hour_stumbles.py", "test_sweep_guide.py",
    "test_executor.py", "test_anywhere_watch.py", "test_judge_final.py", "test_local_job_variables.py",
    "test_monitor_heartbeat.py", "test_launch_interrupt.py", "test_judge_polls.py", "test_lifecycle.py",
    "test_shared_bounded_inputs.py", "test_unguarded.py", "test_demo.py", "test_first_hour_screens.py",
    "test_notify.py",
)
# The side stream's longest tests (serial and long, minutes each). Its scheduler (--dist load) first hands each of
# its four workers two consecutive tests, then one at a time to whichever is free: so these go in pairs, each pair
# 290-325 s as measured (the first eight), and the rest, longest first, fill in after them.
SLOWEST_SIDE_TESTS = (
    "test_one_monitor_job_stops_exactly_the_broken_runs_and_resumes_after_a_requeue",
    "test_two_node_job_checkpoints_on_its_signal_requeues_and_resumes",
    "test_an_array_task_the_guard_stopped_never_shows_a_clean_exit",
    "test_one_local_watcher_stops_the_nan_task_alone_and_ends_with_the_array",
    "test_a_dead_training_node_is_told_as_such_and_the_requeued_job_is_followed",
    "test_the_monitor_requeued_off_its_dead_node_resumes_every_run_with_no_stop_lost_or_repeated",
    "test_one_watcher_stops_the_nan_task_alone_and_ends_with_the_array",
    "test_short_time_limit_checkpoints_requeues_once_and_the_sidecar_follows",
    "test_the_guides_wandb_agent_guards_each_run_and_stops_the_broken_one",
    "test_a_sidecar_leaves_within_seconds_of_its_job_ending_after_a_requeue",
    "test_six_runs_of_three_frameworks_from_one_folder",
    "test_three_runs_of_one_folder_on_slurm",
    "test_a_requeued_run_keeps_reading_its_own_folder_and_wandb_run",
    "test_requeued_sidecar_resumes_the_same_run_and_still_stops_a_later_nan",
    "test_vanished_metrics_wait_then_a_nan_is_stopped_at_the_next_fast_poll_even_without_notes",
    "test_controller_restart_is_ridden_out_and_the_sidecar_still_ends_with_the_job",
    "test_final_state_with_accounting_on_and_off_and_after_purge",
    "test_one_config_launched_twice_each_run_is_judged_on_its_own_files",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    files = {name: i for i, name in enumerate(SLOWEST_FILES)}
    tests = {name: i for i, name in enumerate(SLOWEST_SIDE_TESTS)}

    def rank(item: pytest.Item) -> tuple[int, int]:
        return tests.get(item.name.split("[")[0], len(tests)), files.get(item.path.name, len(files))

    items.sort(key=rank)  # stable: the rest keep their order


@pytest.fixture(scope="session")
def slurm_cluster() -> None:
    """Require the real dev Slurm. Under CI=true its absence fails the test; elsewhere it skips."""
    ok, why = _slurm_up()
    if ok:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"the dev Slurm is not up under CI=true: {why}")
    pytest.skip(f"dev Slurm not up: {why}")


def require(available: bool, why: str) -> None:
    """An optional component a test needs (torch, mlflow, root, a Slurm binary): under CI=true the suite
    installs all of them, so a missing one fails the test; elsewhere the test is skipped with the reason."""
    if available:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"missing under CI=true: {why}")
    pytest.skip(why)


@pytest.fixture(autouse=True)
def _no_leaked_wandb_service() -> object:
    """A test that calls wandb.init in-process leaves its service token in os.environ; without this every later
    subprocess (trainers under Slurm included) would join that test's wandb service."""
    yield
    os.environ.pop("WANDB_SERVICE", None)
