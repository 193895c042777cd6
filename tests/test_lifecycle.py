"""kill / restart end to end: real CLI subprocesses, real jobs (local backend, and the dev Slurm), real files."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from conftest import require

from e2e_helpers import Project, submitted_job_id, wait_for
from guarded_sbatch.scheduler import get_scheduler
from guarded_sbatch.scheduler.interface import JobState

RUN_NAME = "coco-resnet50-bs256-lr3e-4"


def unique_run_name() -> str:
    """The dev Slurm is shared with other tests: a name no other queued job has."""
    return f"{RUN_NAME}-{uuid.uuid4().hex[:6]}"

TRAIN_SCRIPT = """#!/bin/bash
#SBATCH --job-name={name}
#SBATCH --time=00:10:00
#SBATCH --output=train-%j.out
# A tiny trainer: keeps writing checkpoints, artifacts and a W&B-style run folder until it is stopped.
ckpt="{ckpt}"; art="{art}"; wb="{wandb}"
for i in $(seq 1 600); do
  mkdir -p "$ckpt" "$art" "$wb"
  echo "step $i" > "$ckpt/step-$i.pt"; echo "step $i" > "$art/model-$i.bin"; echo "$i" >> "$wb/run-abc123.wandb"
  echo "step $i loss 1.0"
  {fail}
  sleep 0.5
done
"""


def backend_param(name: str) -> object:
    return pytest.param(name, marks=[pytest.mark.slurm]) if name == "slurm" else name


BACKENDS = [backend_param("local"), backend_param("slurm")]


def make_run_project(
    tmp_path: Path, request: pytest.FixtureRequest, backend: str, *, fail: bool = False
) -> tuple[Project, dict[str, Path], str]:
    if backend == "slurm":
        request.getfixturevalue("slurm_cluster")
    name = unique_run_name()
    scratch = tmp_path / "scratch"
    project = scratch / "project"
    paths = {
        "ckpt": scratch / name / "ckpt",
        "art": scratch / "artifacts" / name,
        "wandb": project / "wandb" / "offline-run-20260101_120000-abc123",
        "other_ckpt": scratch / "other-run" / "ckpt",
        "data": project / "data",
        "outside": tmp_path / "outside-roots",
    }
    for key in ("other_ckpt", "data", "outside"):
        paths[key].mkdir(parents=True)
        (paths[key] / "keep.bin").write_bytes(b"unrelated")
    (project / "runs").mkdir()  # a TensorBoard folder, so the monitoring check finds a tracker
    script = project / "train.sh"
    script.write_text(TRAIN_SCRIPT.format(name=name, ckpt=paths["ckpt"], art=paths["art"], wandb=paths["wandb"],
                                          fail="[ $i -ge 3 ] && exit 1" if fail else ""))
    config = tmp_path / "user-config.toml"
    config.write_text(
        f'run_roots = ["{scratch}"]\n[sidecar]\nfast_interval_seconds = 1.0\njob_poll_seconds = 5.0\nmem = "300M"\n'
        "evidence_plot = false\n"
    )
    env = {
        **os.environ, "GUARDED_SBATCH_STATE_DIR": str(tmp_path / "state"), "GUARDED_SBATCH_USER_CONFIG": str(config),
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
    }
    env.pop("GUARDED_SBATCH_SITE_CONFIG", None)
    return Project(project, env), paths, name


def launch(project: Project, backend: str, paths: dict[str, Path]) -> str:
    result = project.cli(
        "--guard-backend", backend, "--guard-waive", "config-diff=lifecycle test, no config file",
        "--guard-checkpoint-dir", str(paths["ckpt"]), "--guard-artifact-dir", str(paths["art"]),
        "--guard-wandb", str(paths["wandb"]), "--guard-monitor", "per-job", "train.sh", check=True,
    )
    return submitted_job_id(result.stdout)


def state_of(backend: str, env: dict[str, str], job_id: str) -> JobState:
    previous = os.environ.get("GUARDED_SBATCH_STATE_DIR")
    os.environ["GUARDED_SBATCH_STATE_DIR"] = env["GUARDED_SBATCH_STATE_DIR"]  # the local backend keeps jobs there
    try:
        return get_scheduler(backend).state(job_id)
    finally:
        if previous is None:
            os.environ.pop("GUARDED_SBATCH_STATE_DIR", None)
        else:
            os.environ["GUARDED_SBATCH_STATE_DIR"] = previous


def step_order(stderr: str) -> list[str]:
    return re.findall(r"^guarded-sbatch: \[(\w+)\] done", stderr, flags=re.MULTILINE)


@pytest.mark.parametrize("backend", BACKENDS)
def test_kill_stops_a_live_run_and_purges_its_folders_in_order(
    tmp_path: Path, request: pytest.FixtureRequest, backend: str
) -> None:
    project, paths, name = make_run_project(tmp_path, request, backend)
    job_id = launch(project, backend, paths)
    record = project.run_record(job_id)
    sidecar_id = record["sidecar_id"]
    assert sidecar_id
    wait_for(lambda: (paths["ckpt"] / "step-2.pt").exists() and state_of(backend, project.env, sidecar_id).is_active,
             60, what="training writing checkpoints while its sidecar runs")

    refused = project.cli("kill", name)  # no terminal, no --yes
    assert refused.returncode == 2 and "--yes" in refused.stderr
    assert state_of(backend, project.env, job_id) is JobState.RUNNING and paths["ckpt"].is_dir()

    started = time.monotonic()
    killed = project.cli("kill", name, "--yes", timeout=180)
    assert killed.returncode == 0, killed.stderr
    assert killed.stdout == ""  # everything for people goes to stderr
    assert step_order(killed.stderr) == ["stop", "checkpoint", "artifact", "tracker", "scheduler"]
    assert state_of(backend, project.env, job_id).is_terminal
    assert state_of(backend, project.env, sidecar_id).is_terminal
    time.sleep(1.5)  # the trainer recreates its folders every 0.5 s while it lives
    for key in ("ckpt", "art", "wandb"):
        assert not paths[key].exists(), f"{key} folder survived the kill"
    for key in ("other_ckpt", "data", "outside"):
        assert (paths[key] / "keep.bin").read_bytes() == b"unrelated"
    assert (project.root / "train.sh").is_file()
    assert project.run_record(job_id)["ended"] == "killed"
    status = json.loads(project.cli_here("status", "--json", check=True).stdout)
    # a killed run stays listed, with how it ended
    assert [(r["state"], r["stopped_by"], r["ended"]) for r in status["runs"]] == [("CANCELLED", "user (kill)", "killed")]
    assert time.monotonic() - started < 120


def test_kill_refuses_a_path_outside_the_run_roots_but_does_the_rest(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    project, paths, name = make_run_project(tmp_path, request, "local")
    paths["art"] = paths["outside"]  # the "artifact folder" recorded for the run lies outside the run roots
    job_id = launch(project, "local", paths)
    wait_for(lambda: (paths["ckpt"] / "step-1.pt").exists(), 30, what="training started")
    killed = project.cli("kill", job_id, "--yes", timeout=120)
    assert killed.returncode == 2
    assert "outside the run roots" in killed.stderr
    assert (paths["outside"] / "keep.bin").read_bytes() == b"unrelated"
    assert not paths["ckpt"].exists()
    assert state_of("local", project.env, job_id).is_terminal


@pytest.mark.parametrize("backend", BACKENDS)
def test_restart_of_a_failed_run_cleans_up_and_relaunches_through_the_preflight(
    tmp_path: Path, request: pytest.FixtureRequest, backend: str
) -> None:
    project, paths, name = make_run_project(tmp_path, request, backend, fail=True)
    job_id = launch(project, backend, paths)
    wait_for(lambda: state_of(backend, project.env, job_id) is JobState.FAILED, 90, what="the training job to fail")
    assert (paths["ckpt"] / "step-3.pt").exists()
    old_files = set(paths["ckpt"].iterdir())
    (paths["ckpt"] / "stale-optimizer-state.pt").write_bytes(b"from the failed attempt")

    restarted = project.cli("restart", name, "--yes", timeout=180)
    assert restarted.returncode == 0, restarted.stderr
    new_job = submitted_job_id(restarted.stdout)
    assert new_job != job_id
    assert "Pre-flight" in restarted.stderr and "restart" in restarted.stderr
    assert step_order(restarted.stderr)[:3] == ["stop", "checkpoint", "artifact"]
    old = project.run_record(job_id)
    new = project.run_record(new_job)
    assert old["ended"] == "restarted"
    assert new["restarted_from"] == old["run_id"]
    assert new["run_name"] == name and new["sidecar_id"]
    assert new["checkpoint_dir"] == str(paths["ckpt"]) and new["artifact_dir"] == str(paths["art"])
    # the restart replays the launch's waivers (config-diff's is recorded only where that check failed: a launcher
    # line with no config file is a warning now, not a block)
    assert [w["check"] for w in new["waivers"]] == [w["check"] for w in old["waivers"]]
    # and every other guard option it was given, as the record kept them (guard_options.replay_words)
    assert {"--guard-monitor", "per-job"} <= set(old["guard_words"]) and "--guard-monitor=per-job" in new["guard_words"]
    assert f"--guard-wandb={paths['wandb']}" in new["guard_words"]
    # the old checkpoints were purged before the new job started writing its own
    wait_for(lambda: (paths["ckpt"] / "step-1.pt").exists(), 60, what="the restarted job to write")
    wait_for(lambda: state_of(backend, project.env, new_job) is JobState.FAILED, 90, what="the restarted job to end")
    assert {p.name for p in paths["ckpt"].iterdir()} == {p.name for p in old_files}  # no stale file survived
    assert (paths["other_ckpt"] / "keep.bin").exists()

    again = project.cli("restart", job_id, "--yes")
    assert again.returncode == 2 and "already restarted" in again.stderr and new["run_id"] in again.stderr


def test_restart_blocked_by_the_preflight_deletes_nothing(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    project, paths, name = make_run_project(tmp_path, request, "local", fail=True)
    job_id = launch(project, "local", paths)
    wait_for(lambda: state_of("local", project.env, job_id) is JobState.FAILED, 60, what="the job to fail")
    script = project.root / "train.sh"  # its log folder is gone: sbatch would not create it, the paths check fails
    script.write_text(script.read_text().replace("--output=train-%j.out", "--output=gone/train-%j.out"))
    blocked = project.cli("restart", name, "--yes", timeout=120)
    assert blocked.returncode == 3, blocked.stderr
    assert "nothing was stopped or deleted" in blocked.stderr
    assert (paths["ckpt"] / "step-3.pt").exists()
    assert project.run_record(job_id)["ended"] == ""


def test_kill_needs_a_known_run(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    project, _, _ = make_run_project(tmp_path, request, "local")
    result = project.cli("kill", "no-such-run", "--yes")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith("guarded-sbatch: error: no guarded run called 'no-such-run'")


def test_kill_never_cancels_another_users_job_local(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """The local backend records the owner of each job: a job recorded for someone else is left alone."""
    project, paths, name = make_run_project(tmp_path, request, "local")
    job_id = launch(project, "local", paths)
    wait_for(lambda: (paths["ckpt"] / "step-1.pt").exists(), 30, what="training started")
    spec_file = Path(project.env["GUARDED_SBATCH_STATE_DIR"]) / "local-jobs" / job_id / "spec.json"
    spec = json.loads(spec_file.read_text())
    spec["owner"] = "somebody-else"
    spec_file.write_text(json.dumps(spec))
    try:
        result = project.cli("kill", name, "--yes", timeout=60)
        assert result.returncode == 4, result.stderr
        assert "belongs to somebody-else" in result.stderr and "nothing was deleted" in result.stderr
        assert state_of("local", project.env, job_id) is JobState.RUNNING
        assert paths["ckpt"].is_dir() and paths["art"].is_dir()
    finally:
        spec["owner"] = os.environ.get("USER") or __import__("getpass").getuser()
        spec_file.write_text(json.dumps(spec))
        project.cli("kill", name, "--yes", timeout=60)


@pytest.mark.slurm
def test_kill_never_cancels_another_users_job_on_slurm(tmp_path: Path, slurm_cluster: None) -> None:
    require(os.geteuid() == 0, "needs root to create a throwaway user and submit as that user")
    user = "gsb-other"
    name = unique_run_name()
    if subprocess.run(["id", user], capture_output=True, timeout=10).returncode != 0:
        subprocess.run(["useradd", "-M", "-s", "/bin/bash", user], check=True, timeout=30)
    submitted = subprocess.run(["runuser", "-u", user, "--", "sbatch", "--parsable", "-o", "/dev/null",
                                "--job-name", name, "--wrap", "sleep 120"],
                               capture_output=True, text=True, cwd="/tmp", timeout=30, check=True)
    job_id = submitted.stdout.strip().split(";")[0]
    scratch = tmp_path / "scratch"
    ckpt = scratch / name / "ckpt"
    ckpt.mkdir(parents=True)
    (ckpt / "step-1.pt").write_bytes(b"theirs")
    config = tmp_path / "user-config.toml"
    config.write_text(f'run_roots = ["{scratch}"]\n')
    env = {**os.environ, "GUARDED_SBATCH_STATE_DIR": str(tmp_path / "state"), "GUARDED_SBATCH_USER_CONFIG": str(config)}
    env.pop("GUARDED_SBATCH_SITE_CONFIG", None)
    project = Project(tmp_path, env)
    run_dir = tmp_path / "state" / "runs" / f"{name}-{job_id}"
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({
        "run_id": run_dir.name, "run_name": name, "backend": "slurm", "job_id": job_id,
        "submit_dir": str(tmp_path), "checkpoint_dir": str(ckpt), "submitted_at": time.time(),
    }))
    try:
        result = project.cli("kill", job_id, "--yes", timeout=60)
        assert result.returncode == 4, result.stderr
        assert f"belongs to {user}" in result.stderr
        squeue = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%u %T"], capture_output=True, text=True, timeout=15)
        assert squeue.stdout.split()[0] == user and squeue.stdout.split()[1] in ("RUNNING", "PENDING")
        assert (ckpt / "step-1.pt").read_bytes() == b"theirs"
    finally:
        subprocess.run(["scancel", job_id], timeout=15)
