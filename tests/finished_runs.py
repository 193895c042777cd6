"""A run's history as a finished guarded run leaves it in the state folder (its run.json, the config snapshot it was
launched with, its sidecar's last state): what the pre-flight chooses a reference among. Written through the same
functions a launch and a sidecar write them with."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

TESTS = Path(__file__).resolve().parent


@contextmanager
def state_folder(folder: Path) -> Iterator[None]:
    """GUARDED_SBATCH_STATE_DIR set to `folder` for an in-process call (restored after)."""
    before = os.environ.get("GUARDED_SBATCH_STATE_DIR")
    os.environ["GUARDED_SBATCH_STATE_DIR"] = str(folder)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("GUARDED_SBATCH_STATE_DIR", None)
        else:
            os.environ["GUARDED_SBATCH_STATE_DIR"] = before


def record_finished_run(config: Path, submit_dir: Path, *, decision: str = "CONTINUE", job_state: str = "COMPLETED",
                        log: Path | None = None, name: str = "coco-resnet50-finished", tb: Path | None = None) -> str:
    """A guarded run of `config`, submitted from `submit_dir` (train.sh), that ended `job_state` with its sidecar's
    last decision `decision` (in the state folder GUARDED_SBATCH_STATE_DIR names); `log` is its stdout, `tb` its
    TensorBoard folder. Returns its run id."""
    from guarded_sbatch.launch.run_reference import save_config_snapshot
    from guarded_sbatch.launch.runconfig import load_run_config
    from guarded_sbatch.records.registry import create_run
    from guarded_sbatch.sidecar.state import SidecarState

    job_id = str(700_000_000 + secrets.randbelow(99_999_999))  # one of its own: users share no id sequence here
    record = create_run(name, "local", job_id, config_path=str(config), submit_dir=str(submit_dir),
                        script="train.sh", sources={
                            **({"stdout": str(log)} if log is not None else {}),
                            **({"specs": [{"kind": "tensorboard", "locator": str(tb), "origin": "--logdir"}]}
                               if tb is not None else {})})
    save_config_snapshot(record, load_run_config(config))
    SidecarState(finished=True, last_decision=decision, last_reason="healthy" if decision == "CONTINUE" else "x",
                 last_job_state=job_state, last_step=1000).save(record.sidecar_state_file)
    return record.run_id


def record_baseline_as(cluster, user, project: Path) -> None:  # type: ignore[no-untyped-def]
    """As `user` of a shared cluster (tests/shared_cluster.py), in their own state folder: the example project's
    baseline (experiments/, its config and log) a guarded run of theirs that finished healthy."""
    code = ("import sys\nfrom pathlib import Path\nsys.path.insert(0, sys.argv[1])\n"
            "from finished_runs import record_finished_run\n"
            "project = Path(sys.argv[2])\nbaseline = project / 'experiments' / 'synthetic-tanh-mlp-baseline'\n"
            "record_finished_run(baseline / 'config.yaml', project, log=baseline / 'train.log', name='baseline')\n")
    result = cluster.run(user, [str(cluster.python), "-P", "-c", code, str(TESTS), str(project)], cwd=project,
                         env=cluster.env(user))
    assert result.returncode == 0, result.stderr
