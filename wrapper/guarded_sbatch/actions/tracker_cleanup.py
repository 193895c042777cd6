"""Deleting a run in its tracker, for the cleanup (actions/cleanup.py): the online W&B run through its API (in a
time-limited child process, once W&B confirms the id the launch gave the job), an MLflow run marked deleted the
way MLflow itself does (SQLite store or file store)."""

from __future__ import annotations

import os
import re
import sqlite3
import stat as stat_module
import time
from pathlib import Path

from guarded_sbatch.core import door
from guarded_sbatch.core.errors import CommandError, SchedulerError, UsageError
from guarded_sbatch.core.extras import require
from guarded_sbatch.core.pychild import CHILD_CWD, python_argv
from guarded_sbatch.core.runner import run_command

MLFLOW_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


_WANDB_DELETE = """
import os, socket, sys, urllib.parse
url = urllib.parse.urlparse(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai")
try:
    socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)), timeout=3).close()
except OSError as exc:
    print(f"unreachable: {exc}")
    sys.exit(3)
import wandb
run = wandb.Api(timeout=15).run(sys.argv[1])
if run.id != sys.argv[2]:
    print(f"W&B answered with run {run.id!r}, not {sys.argv[2]!r}", file=sys.stderr)
    sys.exit(4)
run.delete()
"""


def delete_wandb_run(run_path: str, run_id: str, *, timeout_s: float) -> str:
    """Delete the online W&B run through its API, in a time-limited subprocess (DNS can hang too), once W&B
    confirms that the run at run_path is run_id."""
    require("wandb", f"deleting the online W&B run {run_path}")
    try:
        result = run_command(python_argv("-c", _WANDB_DELETE, run_path, run_id), timeout=timeout_s, check=False,
                             cwd=CHILD_CWD)
    except CommandError as exc:
        if exc.timed_out:
            return f"W&B did not answer within {timeout_s:.0f} s: online run {run_path} not deleted; delete it on the W&B site"
        raise
    if result.returncode == 3:
        return (
            f"W&B API unreachable: online run {run_path} not deleted (delete it on the W&B site); local run folder handled below"
        )
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no message"])[-1]
        raise SchedulerError(f"W&B refused to delete run {run_path}: {last}")
    return f"W&B run {run_path} deleted"


def delete_mlflow_run(kind: str, store: Path, run_id: str) -> str:
    """Mark the run deleted the way MLflow itself does (`mlflow gc` purges it; `mlflow runs restore` undoes it)."""
    deleted_ms = int(time.time() * 1000)
    if not MLFLOW_RUN_ID.fullmatch(run_id):
        raise UsageError(f"MLflow run id {run_id[:80]!r} is not a plain run id: nothing marked deleted")
    if kind == "mlflow-sqlite":
        if not store.is_file():
            raise UsageError(f"MLflow store {store} not found: run {run_id} not deleted")
        try:
            connection = sqlite3.connect(f"file:{store}?mode=rw", uri=True, timeout=10)
            try:
                columns = {row[1] for row in connection.execute("PRAGMA table_info(runs)")}
                if "lifecycle_stage" not in columns:
                    raise UsageError(f"{store} is not an MLflow store (no runs.lifecycle_stage): run {run_id} not deleted")
                with connection:
                    if "deleted_time" in columns:
                        cursor = connection.execute(
                            "UPDATE runs SET lifecycle_stage = 'deleted', deleted_time = ? WHERE run_uuid = ?",
                            (deleted_ms, run_id),
                        )
                    else:
                        cursor = connection.execute("UPDATE runs SET lifecycle_stage = 'deleted' WHERE run_uuid = ?", (run_id,))
            finally:
                connection.close()
        except sqlite3.Error as exc:
            raise UsageError(f"MLflow store {store}: {exc}; run {run_id} not deleted") from None
        if cursor.rowcount == 0:
            return f"MLflow run {run_id} not in {store} (already gone)"
        return f"MLflow run {run_id} marked deleted in {store}"
    metas = _mlflow_metas(store, run_id)
    if not metas:
        return f"MLflow run {run_id} not in {store} (already gone)"
    for meta in metas:
        found = door.read(meta, 1 << 20, own=True, nofollow=True)
        lines = [line for line in found.text().splitlines() if not line.startswith("deleted_time:")]
        if not any(line.strip() in (f"run_id: {run_id}", f"run_uuid: {run_id}") for line in lines):
            continue  # a folder named like the run that is not its meta: left alone
        lines = ["lifecycle_stage: deleted" if line.startswith("lifecycle_stage:") else line for line in lines]
        lines.append(f"deleted_time: {deleted_ms}")
        door.write_atomic(meta, "\n".join(lines) + "\n", 0o644)
    return f"MLflow run {run_id} marked deleted in {metas[0]}"


def _mlflow_metas(store: Path, run_id: str) -> list[Path]:
    """<store>/<experiment>/<run_id>/meta.yaml by exact names (no glob), regular files only, no symlinks."""

    found = []
    try:
        experiments = sorted(os.scandir(store), key=lambda e: e.name)
    except OSError:
        return []
    for experiment in experiments:
        if not experiment.is_dir(follow_symlinks=False):
            continue
        meta = Path(experiment.path) / run_id / "meta.yaml"
        try:
            if not os.path.islink(meta.parent) and stat_module.S_ISREG(os.lstat(meta).st_mode):
                found.append(meta)
        except OSError:
            continue
    return found
