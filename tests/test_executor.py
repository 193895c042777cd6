"""GuardedExecutor: submitit's API through guarded-sbatch's own launch path (the whole pre-flight, launch/submit.py,
recorded sources), and a sidecar that stops a diverging function, on the local backend and the real dev Slurm."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
import uuid
from pathlib import Path

import pytest

from e2e_helpers import wait_for
from guarded_sbatch.actions.cleanup import pinned_run_id
from guarded_sbatch.core.errors import BlockedError, UsageError
from guarded_sbatch.launch.executor import GuardedSlurmJob, GuardStoppedError

RUN_NAME = f"mnist-mlp-bs64-lr1e-2-{uuid.uuid4().hex[:6]}"  # the dev Slurm is shared: a name no other job has



def diverging_training(tb_dir: str, steps: int) -> str:
    """Logs a falling loss to TensorBoard, then NaN; runs ~steps*0.2 s unless it is stopped."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    writer = EventFileWriter(tb_dir)
    for step in range(steps):
        loss = 2.0 * 0.97**step if step < 20 else float("nan")
        value = summary_pb2.Summary.Value(tag="train/loss", simple_value=loss)
        writer.add_event(event_pb2.Event(wall_time=time.time(), step=step, summary=summary_pb2.Summary(value=[value])))
        writer.flush()
        print(f"step {step} loss {loss}", flush=True)
        time.sleep(0.2)
    writer.close()
    return "finished"


@pytest.fixture()
def guarded_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    config = tmp_path / "user-config.toml"
    config.write_text("[sidecar]\nfast_interval_seconds = 1.0\njob_poll_seconds = 5.0\nmem = \"300M\"\nevidence_plot = false\n")
    monkeypatch.setenv("GUARDED_SBATCH_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("GUARDED_SBATCH_USER_CONFIG", str(config))
    monkeypatch.delenv("GUARDED_SBATCH_SITE_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


WAIVE_CONFIG = {"config-diff": "a function job: no config file to diff"}
ALL_CHECKS = ["config-diff", "run-name", "paths", "interpreter", "arguments", "monitoring", "eta", "own-folder"]


def test_a_session_label_blocks_the_submission(guarded_env: Path) -> None:
    from guarded_sbatch.launch.executor import GuardedExecutor
    from guarded_sbatch.scheduler.local import LocalScheduler

    (guarded_env / "runs").mkdir()
    executor = GuardedExecutor(guarded_env / "logs", run_name="run-1", tb_dir="runs/x", cluster="local",
                               waivers=WAIVE_CONFIG)
    with pytest.raises(BlockedError, match="run-name: run name 'run-1' is a session-local label"):
        executor.submit(diverging_training, "runs/x", 1)
    assert not list((guarded_env / "logs").glob(".submission_file_*"))  # the batch script it checked is gone
    jobs = LocalScheduler().root
    assert not (jobs.is_dir() and any(p.name.isdigit() for p in jobs.iterdir()))  # nothing was submitted
    assert [r.name for r in executor.last_preflight] == ALL_CHECKS  # the whole pre-flight, as the CLI runs it
    assert {r.name: r.status.value for r in executor.last_preflight}["run-name"] == "failed"


def test_the_whole_preflight_runs_and_every_check_is_waivable_by_name(guarded_env: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from guarded_sbatch.launch.executor import GuardedExecutor

    executor = GuardedExecutor(guarded_env / "logs", run_name="run-1", tb_dir="missing/parent/tb", cluster="debug")
    with pytest.raises(BlockedError, match="run-name: run name 'run-1' is a session-local label") as blocked:
        executor.submit(diverging_training, "x", 1)
    assert "--guard-" not in str(blocked.value) and 'waivers={"CHECK": "reason"}' in str(blocked.value)
    waived = GuardedExecutor(guarded_env / "logs", run_name="run-1", tb_dir="missing/parent/tb", cluster="debug",
                             waivers={"run-name": "a label is fine for this probe"})
    job = waived.submit(lambda: "ran")
    statuses = {r.name: r for r in waived.last_preflight}
    assert statuses["paths"].status.value == "warned" and "missing/parent" in statuses["paths"].finding
    assert waived.last_report is not None and [w.check for w in waived.last_report.waivers] == ["run-name"]
    said = "\n".join(line for line in capsys.readouterr().err.splitlines()  # the pre-flight is said, in one line
                      if "waiting for the pre-flight" not in line)  # when clear (and a slow one says it waits)
    assert "guarded-sbatch: pre-flight of run-1 clear (warned: " in said and "paths" in said, said
    assert "waived: run-name (a label is fine for this probe)" in said and len(said.splitlines()) == 1, said
    assert job.result() == "ran"
    with pytest.raises(UsageError, match="cannot waive 'nonsense'"):
        GuardedExecutor(guarded_env / "logs", run_name=RUN_NAME, waivers={"nonsense": "no"})
    with pytest.raises(UsageError, match="cluster='slurm', 'local' or 'debug'"):
        GuardedExecutor(guarded_env / "logs", cluster="chronos")


@pytest.mark.slurm
def test_the_sidecar_stops_a_diverging_function(guarded_env: Path, slurm_cluster: None) -> None:
    import cloudpickle
    import submitit

    from guarded_sbatch.launch.executor import GuardedExecutor
    from guarded_sbatch.records.registry import find_run
    from guarded_sbatch.scheduler.slurm import SlurmScheduler

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the job cannot import this test module
    tb_dir = guarded_env / "runs" / RUN_NAME
    tb_dir.parent.mkdir()
    executor = GuardedExecutor(guarded_env / "logs" / "%j", run_name=RUN_NAME, tb_dir=tb_dir,
                               checkpoint_dir=guarded_env / "ckpt", waivers=WAIVE_CONFIG, cluster="slurm")
    executor.update_parameters(timeout_min=5, mem_gb=0.5, cpus_per_task=1)
    started = time.monotonic()
    job = executor.submit(diverging_training, str(tb_dir), 600)
    assert isinstance(job, submitit.Job)
    record = find_run(job.job_id)
    assert record.launched_by == "submitit" and record.run_name == RUN_NAME and record.sidecar_id
    assert record.tb_paths == [str(tb_dir)] and executor.run_ids == [record.run_id]
    sidecar_script = (record.folder / "sidecar.sbatch").read_text()
    assert f"guarded_sbatch sidecar {record.folder}" in sidecar_script  # the run's folder: its record says the rest

    scheduler = SlurmScheduler()
    wait_for(lambda: scheduler.state(job.job_id).is_terminal, 120, 1.0, what="the sidecar to stop the job")
    stopped_after = time.monotonic() - started
    assert scheduler.state(job.job_id).value == "CANCELLED"
    def sidecar_output() -> str:
        return "".join(p.read_text() for p in record.folder.glob("sidecar-*.out"))

    wait_for(lambda: "FINAL_SUMMARY" in sidecar_output(), 60, 0.5, what="the sidecar's final summary")
    output = sidecar_output()
    assert "Decision: STOP" in output and "FINAL_SUMMARY" in output, output
    evidence = json.loads(next(record.evidence_dir.glob("*.json")).read_text())
    assert "nan" in json.dumps(evidence).lower() or "non-finite" in json.dumps(evidence).lower()
    wait_for(lambda: scheduler.state(record.sidecar_id).is_terminal, 60, 1.0, what="the sidecar to end")
    log = Path(str(job.paths.stdout)).read_text()
    assert "step 20 loss nan" in log and "step 599" not in log
    assert stopped_after < 90
    assert record.sources["stdout"] == str(job.paths.stdout) and pinned_run_id(record, "wandb")
    with pytest.raises(GuardStoppedError, match=f"job {job.job_id} was stopped by its guard \\(STOP, non_finite_loss"):
        job.result()
    assert job.guard_stop is not None and job.guard_stop["reason"] == "non_finite_loss"


def healthy_training(tb_dir: str, steps: int, seed: int) -> str:
    """A falling, finite loss: nothing for the sidecar to stop."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    writer = EventFileWriter(tb_dir)
    for step in range(steps):
        value = summary_pb2.Summary.Value(tag="train/loss", simple_value=2.0 * 0.99**step + 0.001 * seed)
        writer.add_event(event_pb2.Event(wall_time=time.time(), step=step, summary=summary_pb2.Summary(value=[value])))
        writer.flush()
    writer.close()
    return f"done {seed}"


@pytest.mark.slurm
def test_a_sweep_of_ten_jobs_is_guarded_and_marked(guarded_env: Path, slurm_cluster: None) -> None:
    import cloudpickle

    from guarded_sbatch.launch.marking import PREFLIGHT, SIDECAR, marker_in
    from guarded_sbatch.records.registry import find_run
    from guarded_sbatch.core.runner import run_command
    from guarded_sbatch.launch.executor import GuardedExecutor
    from guarded_sbatch.scheduler.slurm import SlurmScheduler

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    name = f"sweep-mlp-bs64-lr1e-2-{uuid.uuid4().hex[:6]}"
    (guarded_env / "runs").mkdir()
    executor = GuardedExecutor(guarded_env / "logs" / "%j", run_name=name, tb_dir=guarded_env / "runs" / name,
                               waivers=WAIVE_CONFIG, cluster="slurm")
    executor.update_parameters(timeout_min=5, mem_gb=0.3, cpus_per_task=1)
    jobs = []
    scheduler = SlurmScheduler()
    try:
        for i in range(10):  # each job's marks read at once: a finished job leaves slurmctld's memory (MinJobAge)
            job = executor.submit(healthy_training, str(guarded_env / "runs" / name / f"lr{i}"), 30, i)
            jobs.append(job)
            record = find_run(job.job_id)
            assert record.sidecar_id, f"job {job.job_id} has no sidecar"
            for job_id, kind in ((job.job_id, PREFLIGHT), (record.sidecar_id, SIDECAR)):
                line = run_command(["scontrol", "-o", "show", "job", job_id], timeout=20).stdout
                comment = line.split(" Comment=", 1)[1].split(" ", 1)[0] if " Comment=" in line else ""
                assert marker_in(comment) is not None and marker_in(comment)[0] == kind, line  # type: ignore[index]
        assert len({job.job_id for job in jobs}) == 10 and len(executor.run_ids) == 10
        assert [job.result() for job in jobs] == [f"done {i}" for i in range(10)]
    finally:
        for job in jobs:
            scheduler.cancel(job.job_id)


def test_on_the_local_backend_a_stop_really_stops_the_function(guarded_env: Path) -> None:
    import cloudpickle

    from guarded_sbatch.records.registry import find_run
    from guarded_sbatch.launch.executor import GuardedExecutor
    from guarded_sbatch.scheduler import get_scheduler

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    tb_dir = guarded_env / "runs" / RUN_NAME
    tb_dir.parent.mkdir()
    executor = GuardedExecutor(guarded_env / "logs", run_name=RUN_NAME, tb_dir=tb_dir, cluster="local",
                               waivers=WAIVE_CONFIG)
    executor.update_parameters(timeout_min=5)
    job = executor.submit(diverging_training, str(tb_dir), 400)
    record = find_run(executor.run_ids[0])
    assert record.backend == "local" and record.job_id == job.job_id and record.launched_by == "submitit"
    assert [s for s in record.sources["specs"] if s["kind"] == "tensorboard"] == [] and record.tb_paths == [str(tb_dir)]
    assert record.sources["stdout"] == str(job.paths.stdout)
    local = get_scheduler("local")
    with pytest.raises(GuardStoppedError, match=r"stopped by its guard \(STOP, non_finite_loss: training loss is nan"):
        job.result()
    assert job.state == "CANCELLED" and job.guard_stop is not None and job.guard_stop["decision"] == "STOP"
    log = Path(str(job.paths.stdout)).read_text()
    assert "step 20 loss nan" in log and "step 399" not in log  # the function itself was stopped
    wait_for(lambda: local.state(record.sidecar_id).is_terminal, 60, 0.5, what="the local sidecar to end")


def test_on_the_local_backend_a_healthy_function_returns_its_result(guarded_env: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    import cloudpickle

    from guarded_sbatch.launch.executor import GuardedExecutor

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    (guarded_env / "runs").mkdir()
    executor = GuardedExecutor(guarded_env / "logs" / "%j", run_name=RUN_NAME, tb_dir=guarded_env / "runs" / "h",
                               cluster="local", waivers=WAIVE_CONFIG)
    job = executor.submit(healthy_training, str(guarded_env / "runs" / "h"), 30, 3)
    started = capsys.readouterr().err  # a background start says where its output goes and how to follow it
    assert f"its output goes to {job.paths.stdout} (follow it: `tail -f {job.paths.stdout}`)" in started, started
    assert "`guarded-sbatch status` lists it" in started
    assert job.result() == "done 3" and job.state == "COMPLETED" and job.guard_stop is None
    # a job array on the local backend (map_array): each call is a task with its own run record and result
    runs = [str(guarded_env / "runs" / name) for name in ("a", "b")]
    jobs = executor.map_array(healthy_training, runs, [30, 30], [3, 4])
    assert [j.result() for j in jobs] == ["done 3", "done 4"]
    assert len({j.job_id for j in jobs}) == 2 and all("_" in j.job_id for j in jobs)
    executor.update_parameters(tasks_per_node=2)
    with pytest.raises(UsageError, match="the local backend runs one task per job, not 2"):
        executor.submit(healthy_training, "x", 1, 0)


def test_the_executor_submits_through_submitits_hooks_and_patches_no_class() -> None:
    """GuardedSlurmExecutor subclasses submitit's SlurmExecutor (its `_submit_command` hook); nothing in
    launch/executor.py assigns to an attribute of a class it imports from submitit."""
    import ast

    from submitit.slurm.slurm import SlurmExecutor

    from guarded_sbatch.launch import executor

    assert issubclass(executor.GuardedSlurmExecutor, SlurmExecutor)
    assert "_submit_command" in vars(executor.GuardedSlurmExecutor)
    tree = ast.parse(Path(executor.__file__).read_text(encoding="utf-8"))
    imported = {alias.asname or alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                and (node.module or "").startswith("submitit") for alias in node.names}
    patched = [ast.unparse(target) for node in ast.walk(tree) if isinstance(node, ast.Assign) for target in node.targets
               if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id in imported]
    assert imported >= {"SlurmExecutor"} and patched == []


def test_a_sidecar_that_cannot_be_submitted_cancels_the_local_training_job(guarded_env: Path) -> None:
    import cloudpickle

    from guarded_sbatch.core.errors import SchedulerError
    from guarded_sbatch.launch.executor import GuardedExecutor
    from guarded_sbatch.scheduler.local import LocalScheduler

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    templates = guarded_env / "templates"
    templates.mkdir()
    from guarded_sbatch.launch.templates import load_template

    text, _ = load_template("sidecar.sbatch", [])
    (templates / "sidecar.sbatch").write_text(text.replace("#SBATCH --requeue", "#SBATCH --requeue\n#SBATCH --begin=now+3600"))
    config = guarded_env / "user-config.toml"
    config.write_text(f'template_dirs = ["{templates}"]\n' + config.read_text())
    (guarded_env / "runs").mkdir()
    executor = GuardedExecutor(guarded_env / "logs", run_name=RUN_NAME, tb_dir=guarded_env / "runs" / "c",
                               cluster="local", waivers=WAIVE_CONFIG)
    with pytest.raises(SchedulerError, match=r"training job (\d+) was cancelled: its sidecar could not be submitted "
                                             r"\(.*deferred start") as refused:
        executor.submit(diverging_training, str(guarded_env / "runs" / "c"), 400)
    job_id = re.search(r"training job (\d+)", str(refused.value)).group(1)  # type: ignore[union-attr]
    local = LocalScheduler()
    wait_for(lambda: local.state(job_id).is_terminal, 30, 0.2, what="the training job to be cancelled")
    assert local.state(job_id).value == "CANCELLED"


@pytest.mark.slurm
def test_a_sidecar_that_cannot_be_submitted_cancels_the_slurm_training_job(
    guarded_env: Path, slurm_cluster: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import cloudpickle

    from guarded_sbatch.core.errors import SchedulerError
    from guarded_sbatch.launch.executor import GuardedExecutor
    from guarded_sbatch.scheduler.slurm import SlurmScheduler

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    real = shutil.which("sbatch")
    assert real is not None
    fake = guarded_env / "bin"
    fake.mkdir()
    # a fault injected in front of the real sbatch: it refuses the sidecar only
    (fake / "sbatch").write_text(f"""#!/bin/bash
for word in "$@"; do
  case "$word" in *sidecar.sbatch) echo "sbatch: error: Batch job submission failed: Invalid qos specification" >&2; exit 1;; esac
done
exec {real} "$@"
""")
    (fake / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")
    (guarded_env / "runs").mkdir()
    executor = GuardedExecutor(guarded_env / "logs" / "%j", run_name=RUN_NAME, tb_dir=guarded_env / "runs" / "s",
                               cluster="slurm", waivers=WAIVE_CONFIG)
    executor.update_parameters(timeout_min=5, mem_gb=0.3, cpus_per_task=1)
    with pytest.raises(SchedulerError, match=r"training job (\d+) was cancelled: its sidecar could not be submitted "
                                             r"\(.*Invalid qos") as caught:
        executor.submit(diverging_training, str(guarded_env / "runs" / "s"), 600)
    job_id = re.search(r"training job (\d+)", str(caught.value)).group(1)  # type: ignore[union-attr]
    scheduler = SlurmScheduler()
    wait_for(lambda: scheduler.state(job_id).is_terminal, 60, 1.0, what="the training job to be cancelled")
    assert scheduler.state(job_id).value == "CANCELLED"


@pytest.mark.slurm
def test_map_array_gives_each_array_task_its_own_run_and_one_watcher(guarded_env: Path, slurm_cluster: None) -> None:
    import cloudpickle

    from guarded_sbatch.launch.marking import marker_in
    from guarded_sbatch.records.registry import find_run
    from guarded_sbatch.core.runner import run_command
    from guarded_sbatch.launch.executor import GuardedExecutor
    from guarded_sbatch.scheduler.slurm import SlurmScheduler

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    name = f"array-mlp-bs64-lr1e-2-{uuid.uuid4().hex[:6]}"
    (guarded_env / "runs").mkdir()
    executor = GuardedExecutor(guarded_env / "logs" / "%j", run_name=name, tb_dir=guarded_env / "runs" / name,
                               waivers=WAIVE_CONFIG, cluster="slurm")
    executor.update_parameters(timeout_min=5, mem_gb=0.3, cpus_per_task=1)
    tb_dirs = [str(guarded_env / "runs" / name / f"seed{i}") for i in range(3)]
    jobs = executor.map_array(healthy_training, tb_dirs, [20] * 3, list(range(3)))
    try:
        assert len(jobs) == 3 and all("_" in job.job_id for job in jobs)  # one array, three tasks
        records = [find_run(job.job_id) for job in jobs]
        # a run record per task, all watched by one watcher job (never a sidecar per task)
        assert len({r.run_id for r in records}) == 3 and len({r.monitor_id for r in records}) == 1
        assert all(r.monitor_id and not r.sidecar_id for r in records)
        assert executor.run_ids == [r.run_id for r in records]
        for job, record in zip(jobs, records):
            assert record.job_id == job.job_id
            line = run_command(["scontrol", "-o", "show", "job", job.job_id], timeout=20).stdout
            assert marker_in(line.split(" Comment=", 1)[1].split(" ", 1)[0]) is not None, line
        assert [job.result() for job in jobs] == ["done 0", "done 1", "done 2"]
        assert all(isinstance(job, GuardedSlurmJob) and job.guard_stop is None for job in jobs)
    finally:
        scheduler = SlurmScheduler()
        for job in jobs:
            scheduler.cancel(job.job_id)
