"""Run-identity scenarios (issue 12), run the same way on the local backend and on the dev Slurm: each
sidecar watches exactly its own run, and a new project launches without waivers."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from e2e_helpers import EXAMPLE, Project, make_project, submitted_job_id, wait_for
from package_extras import recorded_tb
from multinode_helpers import release, requeued
from guarded_sbatch.scheduler.interface import JobState
from guarded_sbatch.sources.run_sources import RunSources

CONFIG = "configs/synthetic-tanh-mlp.yaml"
WANDB_ENV = {"WANDB_MODE": "offline", "WANDB_PROJECT": "identity-e2e", "WANDB_SILENT": "true",
             "WANDB_DISABLE_GIT": "true", "WANDB_CONSOLE": "off"}


def pinned_id(record: dict[str, Any], kind: str = "wandb") -> str:
    """The tracker run id the launch gave the job (its kind's pinned spec in the record), or ""."""
    sources = RunSources.from_json(record["sources"])
    pinned = sources.pinned(kind) if sources is not None else None
    return pinned.writer.run_id if pinned is not None else ""


def identity_project(tmp_path: Path, backend: str, *, wandb: bool = False) -> Project:
    project = make_project(tmp_path)
    project.env["GUARDED_SBATCH_BACKEND"] = backend  # so the launch is the everyday `guarded-sbatch train.sh`
    for key in ("WANDB_RUN_ID", "WANDB_RESUME", "WANDB_DIR", "MLFLOW_RUN_CONTEXT"):
        project.env.pop(key, None)
    if wandb:
        project.env.update(WANDB_ENV)
    return project


def train_here(project: Project, *args: str) -> None:
    """A run written by hand in the project (not through guarded-sbatch), e.g. an old diverged one."""
    subprocess.run([sys.executable, "train.py", "--config", CONFIG, *args], cwd=project.root, env=project.env,
                   check=True, capture_output=True, timeout=120)


def launch(project: Project, *args: str) -> tuple[str, dict[str, Any], str]:
    """A launch that passes the pre-flight: with no waiver given, none is used."""
    result = project.cli(*args)
    assert result.returncode == 0, result.stderr
    waiving = "--guard-waive" in args
    assert waiving or "waived" not in result.stderr, result.stderr
    assert "submitting now." in result.stderr, result.stderr
    job_id = submitted_job_id(result.stdout)
    return job_id, project.run_record(job_id), result.stderr


def wait_ended(project: Project, scheduler: Any, job_id: str, timeout: float = 240) -> tuple[JobState, str]:
    """The training job's final state, once its sidecar has finished too; and the sidecar's output."""
    record = project.run_record(job_id)
    wait_for(lambda: scheduler.state(job_id).is_terminal, timeout, 1, f"job {job_id} to end")
    wait_for(lambda: scheduler.state(record["sidecar_id"]).is_terminal, 120, 1, f"sidecar of job {job_id} to end")
    return scheduler.state(job_id), project.sidecar_output(job_id)


def cited_paths(output: str) -> list[str]:
    """Every path a sidecar's reports cite (Run: and Evidence: lines)."""
    paths: list[str] = []
    for line in output.splitlines():
        if line.startswith(("- Evidence:", "- Run:")):
            paths.extend(re.findall(r"(?<![\w.-])(/[^\s,;()]+)", line))
    return paths


def assert_cites_only_its_own(project: Project, job_id: str, output: str) -> None:
    record = project.run_record(job_id)
    own = [*recorded_tb(record), record["sources"]["stdout"], record["sources"]["stderr"],
           str(project.state_dir / "runs" / record["run_id"])]
    own_wandb = pinned_id(record)
    paths = cited_paths(output)
    assert paths, output
    for path in paths:
        if "/wandb/" in path:
            assert own_wandb in path, f"job {job_id} cites another W&B run: {path}"
        else:
            assert any(o and (path == o or path.startswith(o.rstrip("/") + "/")) for o in own), \
                f"job {job_id} cites a file that is not its own: {path}\n{output}"


def old_diverged_run_is_ignored(tmp_path: Path, backend: str, scheduler: Any) -> None:
    project = identity_project(tmp_path, backend)
    train_here(project, "--logdir", "runs/old-diverged", "--steps", "200", "--diverge-at", "120", "--step-seconds", "0")
    import time

    time.sleep(2)  # the old run ended before this one is submitted
    job_id, record, _ = launch(project, "train.sh")  # the everyday form: no --guard-tb
    assert recorded_tb(record) == [str(project.root / "runs" / "synthetic-tanh-mlp-bs64-lr5e-2")]
    state, output = wait_ended(project, scheduler, job_id)
    assert state is JobState.COMPLETED, output
    assert "Decision: STOP" not in output and "FINAL_SUMMARY" not in output and "ended COMPLETED" in output
    assert "old-diverged" not in output
    assert_cites_only_its_own(project, job_id, output)


def concurrent_runs_stay_apart(tmp_path: Path, backend: str, scheduler: Any) -> None:
    """Two runs of one project (shared runs/ and wandb/), one healthy, one NaN; then `kill --yes` of the
    healthy one deletes exactly its W&B run folder."""
    project = identity_project(tmp_path, backend, wandb=True)
    healthy_id, healthy, _ = launch(project, "--job-name", "synthetic-tanh-mlp-bs64-healthy", "train.sh",
                                    "--logdir", "runs/healthy", "--wandb", "--steps", "500")
    nan_id, broken, _ = launch(project, "--job-name", "synthetic-tanh-mlp-bs64-nan", "train.sh",
                               "--logdir", "runs/nan", "--wandb", "--steps", "3000", "--diverge-at", "60")
    healthy_wandb, nan_wandb = pinned_id(healthy), pinned_id(broken)
    assert healthy_wandb and nan_wandb and healthy_wandb != nan_wandb
    nan_state, nan_output = wait_ended(project, scheduler, nan_id)
    healthy_state, healthy_output = wait_ended(project, scheduler, healthy_id)
    assert nan_state is JobState.CANCELLED and "FINAL_SUMMARY" in nan_output, nan_output
    assert healthy_state is JobState.COMPLETED and "Decision: STOP" not in healthy_output, healthy_output
    for output, other in ((healthy_output, ("runs/nan", nan_wandb, f"job {nan_id}", f"slurm-{nan_id}.out", "-nan")),
                          (nan_output, ("runs/healthy", healthy_wandb, f"job {healthy_id}", f"slurm-{healthy_id}.out",
                                        "-healthy"))):
        for mention in other:
            assert mention not in output, f"{mention!r} in:\n{output}"
    assert_cites_only_its_own(project, healthy_id, healthy_output)
    assert_cites_only_its_own(project, nan_id, nan_output)
    evidence_dir = project.state_dir / "runs" / broken["run_id"] / "evidence"
    evidence = (evidence_dir / "evidence.json").read_text()
    assert "runs/healthy" not in evidence and healthy_wandb not in evidence
    assert not (project.state_dir / "runs" / healthy["run_id"] / "evidence").exists()
    # kill --yes: exactly the W&B run this job wrote
    wandb_dir = project.root / "wandb"
    before = sorted(p.name for p in wandb_dir.iterdir())
    assert any(name.endswith(f"-{healthy_wandb}") for name in before), before
    killed = project.cli("kill", healthy["run_id"], "--yes", timeout=180)
    # the healthy run had completed: nothing to stop (exit 1, said so), its files cleaned up all the same
    assert killed.returncode == 1 and "nothing stopped" in killed.stderr, killed.stderr
    after = sorted(p.name for p in wandb_dir.iterdir())
    assert sorted(set(before) - set(after)) == [n for n in before if n.endswith(f"-{healthy_wandb}")], (before, after)
    assert any(name.endswith(f"-{nan_wandb}") for name in after)
    assert (project.root / "runs" / "healthy").is_dir() and (project.root / "runs" / "nan").is_dir()


def new_project_launches_clean(tmp_path: Path, backend: str, scheduler: Any) -> None:
    """train.py, a config, no runs/, no reference: exit 0, no waiver, and the report says what it could not
    check and why. Once the run finished healthy it is the default reference of its config."""
    project = identity_project(tmp_path, backend)
    shutil.rmtree(project.root)
    project.root.mkdir()
    for name in ("train.py", "train.sh"):
        shutil.copy(EXAMPLE / name, project.root / name)
    (project.root / "configs").mkdir()
    shutil.copy(EXAMPLE / CONFIG, project.root / CONFIG)
    job_id, record, report = launch(project, "train.sh", "--steps", "200", "--step-seconds", "0.02")
    assert record["waivers"] == []
    assert "[warn] config-diff: not checked: no reference run yet" in report
    assert re.search(r"\[warn\] eta: not checked: cannot estimate the run time \(no earlier run of this config has a log", report)
    assert "the trainer must create it" in report and "BLOCKED" not in report
    state, output = wait_ended(project, scheduler, job_id)
    assert state is JobState.COMPLETED and "Decision: STOP" not in output, output
    again = project.cli_here("check", "train.sh", "--logdir", "runs/second-try")
    assert f"the last run of this config that finished healthy: run {record['run_id']}" in again.stderr
    named = project.cli_here("reference", record["run_id"])
    assert named.returncode == 0, named.stderr
    again = project.cli_here("check", "train.sh", "--logdir", "runs/second-try")
    assert f"named with `guarded-sbatch reference`: run {record['run_id']}" in again.stderr, again.stderr
    assert "eta: ends about" in again.stderr  # the speed now comes from that run's own log


def state_of(project: Project, job_id: str) -> dict[str, Any]:
    record = project.run_record(job_id)
    try:
        return json.loads((project.state_dir / "runs" / record["run_id"] / "sidecar-state.json").read_text())
    except (OSError, ValueError):
        return {}


def _seen_steps(project: Project, job_id: str, steps: int) -> bool:
    return (state_of(project, job_id).get("last_step") or 0) >= steps


def requeued_run_keeps_its_own(tmp_path: Path, scheduler: Any) -> None:
    """Slurm: `scontrol requeue` runs the job again (same id, same WANDB_RUN_ID); its sidecar keeps reading
    the run's own folder and W&B run, and never a neighbour's written meanwhile into the same project."""
    project = identity_project(tmp_path, "slurm", wandb=True)
    job_id, record, _ = launch(project, "--job-name", "synthetic-tanh-mlp-bs64-requeued", "train.sh",
                               "--logdir", "runs/requeued", "--wandb", "--steps", "700")
    own_wandb = pinned_id(record)
    wait_for(lambda: _seen_steps(project, job_id, 50), 300, 1, "the sidecar to read the first steps")
    subprocess.run(["scontrol", "requeue", job_id], check=True, capture_output=True, timeout=30)
    wait_for(lambda: requeued(job_id), 60, 0.5, "the job to be back in the queue")
    release(job_id)
    neighbour_env = {k: v for k, v in project.env.items() if k != "WANDB_RUN_ID"}
    subprocess.run([sys.executable, "train.py", "--config", CONFIG, "--logdir", "runs/neighbour", "--wandb",
                    "--steps", "300", "--step-seconds", "0", "--diverge-at", "20"], cwd=project.root,
                   env=neighbour_env, check=True, capture_output=True, timeout=120)
    state, output = wait_ended(project, scheduler, job_id, timeout=600)
    assert state is JobState.COMPLETED, output
    assert "Decision: STOP" not in output and "neighbour" not in output
    events = sorted((project.root / "runs" / "requeued").glob("events.out.tfevents.*"))
    assert len(events) == 2, events  # one per start of the job
    own_runs = sorted((project.root / "wandb").glob(f"*run-*-{own_wandb}"))
    assert len(own_runs) == 2, own_runs  # the requeued job went on with the same W&B run id
    assert str(events[-1]) in output, (events, state_of(project, job_id), output)
    assert own_wandb in output, (own_wandb, output)
    assert_cites_only_its_own(project, job_id, output)


def restarted_run_keeps_its_own(tmp_path: Path, backend: str, scheduler: Any) -> None:
    """`guarded-sbatch restart RUN`: the relaunched run reads its own folder (the earlier start's files are
    its own) and the W&B run of its new job, and nothing of a neighbour's."""
    project = identity_project(tmp_path, backend, wandb=True)
    train_here(project, "--logdir", "runs/neighbour", "--steps", "100", "--step-seconds", "0", "--diverge-at", "20")
    job_id, record, _ = launch(project, "--job-name", "synthetic-tanh-mlp-bs64-restarted", "train.sh",
                               "--logdir", "runs/restarted", "--wandb", "--steps", "3000")
    wait_for(lambda: _seen_steps(project, job_id, 50), 300, 1, "the sidecar to read the first steps")
    restarted = project.cli("restart", record["run_id"], "--yes", timeout=240)
    assert restarted.returncode == 0, restarted.stderr
    new = [json.loads(p.read_text()) for p in (project.state_dir / "runs").glob("*/run.json")]
    new_record = next(r for r in new if r.get("restarted_from") == record["run_id"])
    new_id = new_record["job_id"]
    assert new_record["sources"]["since"] == record["sources"]["since"]  # the run's own files go on
    assert pinned_id(new_record) != pinned_id(record)  # the old one was deleted
    wait_for(lambda: _seen_steps(project, new_id, 50), 300, 1, "the new sidecar to read steps")
    wait_for(lambda: len(list((project.root / "runs" / "restarted").glob("events.*"))) == 2, 90, 1, "a second event file")
    output = project.sidecar_output(new_id)
    assert "neighbour" not in output and "Decision: STOP" not in output
    killed = project.cli("kill", new_record["run_id"], "--yes", timeout=180)
    assert killed.returncode == 0, killed.stderr
    assert_cites_only_its_own(project, new_id, output)


# the pre-flight refuses a folder a live run writes; the waiver is how a user who means it launches anyway
SHARED_FOLDER_WAIVER = ("--guard-waive", "own-folder=two seeds of one config in one folder")


def one_config_launched_twice(tmp_path: Path, backend: str, scheduler: Any, *,
                              waiver: tuple[str, ...] = SHARED_FOLDER_WAIVER) -> None:
    """One config launched twice while the first runs (a second job name, the logdir unchanged): both runs write
    one folder. Each sidecar reads only the event file its own job wrote: the NaN run is cancelled, the healthy
    one completes, and no report of either cites the other's file."""
    project = identity_project(tmp_path, backend)
    shared = "runs/one-config"
    healthy_id, healthy, _ = launch(project, "--job-name", "synthetic-tanh-mlp-bs64-first", "train.sh",
                                    "--logdir", shared, "--steps", "500")
    folder = project.root / shared
    wait_for(lambda: folder.is_dir() and any("tfevents" in p.name for p in folder.iterdir()), 120, 0.5,
             "the first run's event file")
    nan_id, broken, _ = launch(project, *waiver, "--job-name", "synthetic-tanh-mlp-bs64-second", "train.sh",
                               "--logdir", shared, "--steps", "3000", "--nan-at", "60")
    assert recorded_tb(healthy) == recorded_tb(broken) == [str(folder)]
    nan_state, nan_output = wait_ended(project, scheduler, nan_id)
    healthy_state, healthy_output = wait_ended(project, scheduler, healthy_id)
    files = sorted(p.name for p in folder.iterdir() if "tfevents" in p.name)
    assert len(files) == 2, files
    assert nan_state is JobState.CANCELLED and "FINAL_SUMMARY" in nan_output, nan_output
    assert healthy_state is JobState.COMPLETED and "Decision: STOP" not in healthy_output, healthy_output
    cited = {output: [name for name in files if name in output] for output in (healthy_output, nan_output)}
    assert len(cited[healthy_output]) == 1 and len(cited[nan_output]) == 1, cited
    assert cited[healthy_output] != cited[nan_output], cited
    for job_id, output in ((healthy_id, healthy_output), (nan_id, nan_output)):
        assert_cites_only_its_own(project, job_id, output)
    seen = project.run_record(healthy_id)["sources"].get("seen", {})
    assert seen.get("pids") and any(f".{pid}." in cited[healthy_output][0] for pid in seen["pids"]), seen
