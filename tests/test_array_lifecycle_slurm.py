"""status, show, kill and restart of a job array's tasks on the real dev Slurm: each task is a run of its own
(`J_T`); a kill of one task cancels it alone and keeps what a sibling also names; a kill of `J` cancels the rest
with one scancel; status shows a row per task, or one for the array (--collapse)."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest

from cli_runner import run_cli
from guarded_sbatch.cli.kill_restart import restart_launch_argv
from guarded_sbatch.records.registry import create_run
from guarded_sbatch.scheduler.slurm import SlurmScheduler

pytestmark = [pytest.mark.slurm]


def _squeue_tasks(array: str) -> dict[str, str]:
    out = subprocess.run(["squeue", "-h", "-r", "-j", array, "-t", "all", "-o", "%i %T"], capture_output=True,
                         text=True, timeout=30).stdout
    return dict(line.split() for line in out.splitlines() if line.strip())


def test_kill_one_task_then_the_array_and_status_rows(slurm_cluster: None, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (tmp_path / "user.toml").write_text("", encoding="utf-8")
    env = {"GUARDED_SBATCH_STATE_DIR": str(tmp_path / "state"), "GUARDED_SBATCH_USER_CONFIG": str(tmp_path / "user.toml")}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("GUARDED_SBATCH_SITE_CONFIG", raising=False)
    name = f"synthetic-tanh-lrsweep-t{uuid.uuid4().hex[:6]}"
    array = subprocess.run(["sbatch", "--parsable", "--array=0-2", "-J", name, "-o", str(tmp_path / "t-%A_%a.out"),
                            "--mem=50M", "--wrap", "sleep 300"], capture_output=True, text=True, timeout=60,
                           check=True).stdout.strip().split(";")[0]
    shared = project / "ckpt-shared"
    try:
        own = {t: project / f"ckpt-{t}" for t in range(3)}
        for folder in (shared, *own.values()):
            folder.mkdir()
            (folder / "step-1.pt").write_text("x")
        for t in range(3):
            create_run(name, "slurm", f"{array}_{t}", submit_dir=str(project), script="train.sh",
                       checkpoint_dir=str(own[t]), artifact_dir=str(shared))

        status = run_cli(["status", "--json"], check=True)
        rows = {row["job_id"]: row for row in json.loads(status.stdout)["runs"]}
        assert set(rows) == {f"{array}_{t}" for t in range(3)}
        collapsed = json.loads(run_cli(["status", "--json", "--collapse"], check=True).stdout)["runs"]
        assert [row["job_id"] for row in collapsed] == [array] and collapsed[0]["task_count"] == 3

        killed = run_cli(["kill", f"{array}_1", "--yes"])
        assert killed.returncode == 0, killed.stderr
        assert f"kept {shared}" in killed.stderr
        tasks = _squeue_tasks(array)
        assert SlurmScheduler().state(f"{array}_1").value == "CANCELLED"
        assert all(tasks.get(f"{array}_{t}") in ("PENDING", "RUNNING") for t in (0, 2)), tasks
        assert not own[1].exists() and own[0].exists() and own[2].exists() and shared.exists()

        show = run_cli(["show", array], check=True)
        assert all(f"{array}_{t}" in show.stdout for t in range(3)), show.stdout

        killed_all = run_cli(["kill", array, "--yes"])
        assert killed_all.returncode == 0, killed_all.stderr
        scheduler = SlurmScheduler()
        assert {t: scheduler.state(f"{array}_{t}").value for t in range(3)} == {t: "CANCELLED" for t in range(3)}
        assert not own[0].exists() and not own[2].exists()
        rows = {row["job_id"]: row for row in json.loads(run_cli(["status", "--json"], check=True).stdout)["runs"]}
        assert {job: (row["state"], row["stopped_by"]) for job, row in rows.items()} == {
            f"{array}_{t}": ("CANCELLED", "user (kill)") for t in range(3)}
    finally:
        subprocess.run(["scancel", array], capture_output=True, timeout=30)


def test_a_task_restarts_as_a_one_task_array() -> None:
    from guarded_sbatch.records.registry import RunRecord

    task = RunRecord(run_id="x-9_3", run_name="x", backend="slurm", job_id="9_3", script="train.sh",
                     sbatch_options=["--array=0-7%2"])
    argv = restart_launch_argv(task, ())
    assert argv[argv.index("--array=0-7%2") + 1] == "--array=3" and argv[-1] == "train.sh"
    assert "--array=3" not in restart_launch_argv(task, (), whole_array=True)
