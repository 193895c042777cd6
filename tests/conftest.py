"""Shared fixtures. A test that needs Slurm fails under CI=true when the cluster is missing."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# A suite started where SIGINT is ignored (scripts/test's side streams run in the background of a script, so do
# nohup'd and some CI runs) would hand that to every process a test starts; the tests that interrupt their own
# processes (a Ctrl-C'd launch, a stop's SIGINT) need it to act as at a terminal. A handled signal is reset to
# its default in each child.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


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


# The files that take longest (minutes of waiting on Slurm and trainers), longest first. scripts/test hands files to
# its workers in collection order (--no-loadscope-reorder), so these start at once and the quick files fill in
# around them; left to xdist's default (most tests first), they came last and the run ended on one of them.
SLOWEST_FILES = (
    "test_e2e_identity_slurm.py", "test_e2e_frameworks_local.py", "test_e2e_identity_local.py",
    "test_sidecar_faults_slurm.py", "test_one_config_twice.py", "test_e2e_frameworks_slurm.py", "test_executor.py",
    "test_e2e_slurm.py", "test_multinode_training.py", "test_anywhere_watch.py", "test_judge_final.py",
    "test_notify.py", "test_lifecycle.py", "test_demo.py", "test_judge_incremental.py", "test_series_cap.py",
    "test_sbatch_habits.py", "test_corpus_dense.py", "test_corpus_sources.py", "test_shared_bounded_inputs.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(SLOWEST_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(SLOWEST_FILES)))  # stable: the rest keep their order


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
