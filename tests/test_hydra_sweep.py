"""Hydra's multirun through the guard: the project's launcher plugin (wrapper/hydra_plugins/guarded_submitit_launcher,
`hydra/launcher=guarded_submitit_slurm` and its local twin) run with the user guide's example app as written
(examples/hydra_sweep): one job array, one pre-flight, one watcher, each job its own run; the diverging job stopped
by its guard, the others COMPLETED."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from e2e_helpers import REPO, make_project, wait_for

EXAMPLE = REPO / "examples" / "hydra_sweep"


def _sweep(tmp_path: Path, launcher: str) -> tuple[subprocess.CompletedProcess[str], list[dict[str, object]], Path]:
    project = make_project(tmp_path, fast_interval=1.0, job_poll=5.0)
    root = tmp_path / "hydra"
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns("multirun", "outputs", "__pycache__"))
    # the command of the user guide, as written
    done = subprocess.run([sys.executable, "train.py", "-m", f"hydra/launcher={launcher}", "lr=0.01,0.1,100"],
                          cwd=root, env=project.env, capture_output=True, text=True, timeout=400,
                          stdin=subprocess.DEVNULL)

    def runs() -> list[dict[str, object]]:
        status = subprocess.run([sys.executable, "-m", "guarded_sbatch", "status", "--json"], cwd=root,
                                env=project.env, capture_output=True, text=True, timeout=60, check=True)
        return list(json.loads(status.stdout)["runs"])

    # a job's result is there a moment before Slurm has the job ended
    seen: list[dict[str, object]] = []

    def all_ended() -> list[dict[str, object]]:
        seen[:] = runs()
        return seen if seen and all(r["state"] in ("COMPLETED", "CANCELLED", "FAILED") for r in seen) else []

    try:
        ended = wait_for(all_ended, 180, 1.0, what="the sweep's jobs to end")
    except AssertionError as exc:  # which job did not end, and what the multirun said
        raise AssertionError(f"{exc}: {[(r['job_id'], r['state'], r['reason']) for r in seen]}\n"
                             f"{(done.stdout + done.stderr)[-3000:]}") from None
    return done, list(ended), root


def _judged(done: subprocess.CompletedProcess[str], runs: list[dict[str, object]], root: Path) -> None:
    said = done.stdout + done.stderr
    assert done.returncode != 0, said  # a job of the sweep was stopped: the multirun says so
    assert "Error executing job with overrides: ['lr=100']" in said, said
    assert "was stopped by its guard (STOP, " in said, said
    assert said.count("pre-flight of train-lr-sweep clear") == 1, said  # one pre-flight for the sweep
    assert [run["run"] for run in runs] == ["train-lr-sweep"] * 3, runs  # the name from what varies
    by_task = {str(run["job_id"]).rsplit("_", 1)[1]: run for run in runs}
    assert sorted(by_task) == ["0", "1", "2"], runs  # Hydra's job numbers are the array's tasks
    assert [by_task[t]["state"] for t in ("0", "1")] == ["COMPLETED", "COMPLETED"], runs
    assert by_task["2"]["state"] == "CANCELLED" and by_task["2"]["decision"] == "STOP", runs
    assert by_task["2"]["stopped_by"] == "guard", runs
    assert len({run["run_id"] for run in runs}) == 3
    assert (next(root.glob("multirun/*/*/.guard")) / "config.yaml").is_file()  # the config the pre-flight read


@pytest.mark.slurm
def test_a_hydra_multirun_on_slurm_is_guarded_job_by_job(tmp_path: Path, slurm_cluster: None) -> None:
    done, runs, root = _sweep(tmp_path, "guarded_submitit_slurm")
    _judged(done, runs, root)
    records = [json.loads(path.read_text()) for path in (tmp_path / "state" / "runs").glob("*/run.json")]
    assert sorted(r["job_id"] for r in records) == sorted(str(run["job_id"]) for run in runs)
    assert all(r["launched_by"] == "submitit" and not r["sidecar_id"] for r in records), records
    monitors = {r["monitor_id"] for r in records}
    assert len(monitors) == 1 and None not in monitors and "" not in monitors  # one watcher for the sweep


def test_a_hydra_multirun_on_the_local_backend_is_guarded_job_by_job(tmp_path: Path) -> None:
    done, runs, root = _sweep(tmp_path, "guarded_submitit_local")
    _judged(done, runs, root)
    assert {run["backend"] for run in runs} == {"local"}


def test_the_sweep_is_named_from_what_varies() -> None:
    from hydra_plugins.guarded_submitit_launcher._sweep import sweep_name

    assert sweep_name("train", [["lr=0.01", "seed=1"], ["lr=0.1", "seed=1"]]) == "train-lr-sweep"
    assert sweep_name("train", [["model.lr=1e-3", "+seed=1"], ["model.lr=1e-3", "+seed=2"]]) == "train-seed-sweep"
    assert sweep_name("my_app", [["optimizer=adam"]]) == "my-app-optimizer-sweep"
