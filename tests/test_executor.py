"""GuardedExecutor: submitit's API, the pre-flight for function jobs, and a sidecar that stops a diverging
function on the real dev Slurm."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
import uuid
from pathlib import Path

import pytest

from e2e_helpers import wait_for
from guarded_sbatch.core.errors import BlockedError, UsageError

RUN_NAME = f"mnist-mlp-bs64-lr1e-2-{uuid.uuid4().hex[:6]}"  # the dev Slurm is shared: a name no other job has

# Under CI=true the dev Slurm is installed: a missing srun there must fail the tests, never skip them.
pytestmark = pytest.mark.skipif(shutil.which("srun") is None and os.environ.get("CI") != "true",
                                reason="submitit's Slurm executor needs srun on PATH")


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
    config.write_text("[sidecar]\nfast_interval_seconds = 1.0\njob_poll_seconds = 5.0\nmem = \"300M\"\n")
    monkeypatch.setenv("GUARDED_SBATCH_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("GUARDED_SBATCH_USER_CONFIG", str(config))
    monkeypatch.delenv("GUARDED_SBATCH_SITE_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_session_label_blocks_the_submission(guarded_env: Path) -> None:
    from guarded_sbatch.launch.executor import GuardedExecutor

    (guarded_env / "runs").mkdir()
    executor = GuardedExecutor(guarded_env / "logs", run_name="run-1", tb_dir="runs/x")
    with pytest.raises(BlockedError, match="run-name: run name 'run-1' is a session-local label"):
        executor.submit(diverging_training, "runs/x", 1)
    assert not list((guarded_env / "logs").glob("*.out"))  # nothing was submitted
    assert [r.status.value for r in executor.last_preflight] == ["failed", "passed", "passed"]


def test_a_missing_folder_blocks_and_the_checks_are_waivable_by_name(guarded_env: Path) -> None:
    from guarded_sbatch.launch.executor import GuardedExecutor

    executor = GuardedExecutor(guarded_env / "logs", run_name=RUN_NAME, tb_dir="missing/parent/tb")
    with pytest.raises(BlockedError, match="paths: TensorBoard folder: .*missing/parent does not exist"):
        executor.submit(diverging_training, "x", 1)
    with pytest.raises(UsageError, match="cannot waive 'eta'"):
        GuardedExecutor(guarded_env / "logs", run_name=RUN_NAME, waivers={"eta": "no"})
    with pytest.raises(UsageError, match="cluster='slurm', 'local' or 'debug'"):
        GuardedExecutor(guarded_env / "logs", cluster="chronos")


def test_monitoring_defaults_to_the_jobs_stdout(guarded_env: Path) -> None:
    from guarded_sbatch.launch.executor import GuardedExecutor

    executor = GuardedExecutor(guarded_env / "logs", run_name=RUN_NAME)
    result = executor._check_monitoring()
    assert result.status.value == "warned" and "%j_0_log.out" in result.finding


@pytest.mark.slurm
def test_the_sidecar_stops_a_diverging_function(guarded_env: Path, slurm_cluster: None) -> None:
    import cloudpickle
    import submitit

    from guarded_sbatch.launch.executor import GuardedExecutor
    from guarded_sbatch.core.registry import find_run
    from guarded_sbatch.scheduler.slurm import SlurmScheduler

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the job cannot import this test module
    tb_dir = guarded_env / "runs" / RUN_NAME
    tb_dir.parent.mkdir()
    executor = GuardedExecutor(guarded_env / "logs" / "%j", run_name=RUN_NAME, tb_dir=tb_dir,
                               checkpoint_dir=guarded_env / "ckpt")
    executor.update_parameters(timeout_min=5, mem_gb=0.5, cpus_per_task=1)
    started = time.monotonic()
    job = executor.submit(diverging_training, str(tb_dir), 600)
    assert isinstance(job, submitit.Job)
    record = find_run(job.job_id)
    assert record.launched_by == "submitit" and record.run_name == RUN_NAME and record.sidecar_id
    assert record.tb_paths == [str(tb_dir)] and executor.run_ids == [record.run_id]
    sidecar_script = (record.folder / "sidecar.sbatch").read_text()
    assert f"--job {job.job_id}" in sidecar_script

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

    from guarded_sbatch.core.marker import PREFLIGHT, SIDECAR, marker_in
    from guarded_sbatch.core.registry import find_run
    from guarded_sbatch.core.runner import run_command
    from guarded_sbatch.launch.executor import GuardedExecutor
    from guarded_sbatch.scheduler.slurm import SlurmScheduler

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    name = f"sweep-mlp-bs64-lr1e-2-{uuid.uuid4().hex[:6]}"
    (guarded_env / "runs").mkdir()
    executor = GuardedExecutor(guarded_env / "logs" / "%j", run_name=name, tb_dir=guarded_env / "runs" / name)
    executor.update_parameters(timeout_min=5, mem_gb=0.3, cpus_per_task=1)
    jobs = [executor.submit(healthy_training, str(guarded_env / "runs" / name / f"lr{i}"), 30, i) for i in range(10)]
    assert len({job.job_id for job in jobs}) == 10 and len(executor.run_ids) == 10
    scheduler = SlurmScheduler()
    try:
        for job in jobs:
            record = find_run(job.job_id)
            assert record.sidecar_id, f"job {job.job_id} has no sidecar"
            for job_id, kind in ((job.job_id, PREFLIGHT), (record.sidecar_id, SIDECAR)):
                line = run_command(["scontrol", "-o", "show", "job", job_id], timeout=20).stdout
                comment = line.split(" Comment=", 1)[1].split(" ", 1)[0] if " Comment=" in line else ""
                assert marker_in(comment) is not None and marker_in(comment)[0] == kind, line  # type: ignore[index]
        assert [job.result() for job in jobs] == [f"done {i}" for i in range(10)]
    finally:
        for job in jobs:
            scheduler.cancel(job.job_id)


def test_the_local_cluster_runs_the_preflight_and_a_local_sidecar(guarded_env: Path) -> None:
    import cloudpickle

    from guarded_sbatch.core.registry import find_run
    from guarded_sbatch.launch.executor import GuardedExecutor
    from guarded_sbatch.scheduler import get_scheduler

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    with pytest.raises(BlockedError, match="run-name"):
        GuardedExecutor(guarded_env / "logs", run_name="tmp", cluster="local").submit(diverging_training, "x", 1)
    tb_dir = guarded_env / "runs" / RUN_NAME
    tb_dir.parent.mkdir()
    executor = GuardedExecutor(guarded_env / "logs", run_name=RUN_NAME, tb_dir=tb_dir, cluster="local")
    executor.update_parameters(timeout_min=5)
    job = executor.submit(diverging_training, str(tb_dir), 600)
    record = find_run(executor.run_ids[0])
    assert record.backend == "process" and record.job_id.startswith(f"{job.job_id}@")
    local = get_scheduler("local")
    wait_for(lambda: job.done(), 90, 0.5, what="the local sidecar to stop the diverging function")
    sidecar_out = lambda: "".join(p.read_text() for p in record.folder.glob("sidecar-*.out"))  # noqa: E731
    wait_for(lambda: "FINAL_SUMMARY" in sidecar_out(), 60, 0.5, what="the local sidecar's final summary")
    assert "Decision: STOP" in sidecar_out()
    wait_for(lambda: local.state(record.sidecar_id).is_terminal, 60, 0.5, what="the local sidecar to end")
    assert "step 599" not in Path(str(job.paths.stdout)).read_text()


@pytest.mark.slurm
def test_map_array_gives_each_array_task_its_own_sidecar(guarded_env: Path, slurm_cluster: None) -> None:
    import cloudpickle

    from guarded_sbatch.core.marker import marker_in
    from guarded_sbatch.core.registry import find_run
    from guarded_sbatch.core.runner import run_command
    from guarded_sbatch.launch.executor import GuardedExecutor
    from guarded_sbatch.scheduler.slurm import SlurmScheduler

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    name = f"array-mlp-bs64-lr1e-2-{uuid.uuid4().hex[:6]}"
    (guarded_env / "runs").mkdir()
    executor = GuardedExecutor(guarded_env / "logs" / "%j", run_name=name, tb_dir=guarded_env / "runs" / name)
    executor.update_parameters(timeout_min=5, mem_gb=0.3, cpus_per_task=1)
    tb_dirs = [str(guarded_env / "runs" / name / f"seed{i}") for i in range(3)]
    jobs = executor.map_array(healthy_training, tb_dirs, [20] * 3, list(range(3)))
    try:
        assert len(jobs) == 3 and all("_" in job.job_id for job in jobs)  # one array, three tasks
        records = [find_run(job.job_id) for job in jobs]
        assert len({r.sidecar_id for r in records}) == 3 and all(r.sidecar_id for r in records)
        for job, record in zip(jobs, records):
            assert record.job_id == job.job_id
            line = run_command(["scontrol", "-o", "show", "job", job.job_id], timeout=20).stdout
            assert marker_in(line.split(" Comment=", 1)[1].split(" ", 1)[0]) is not None, line
        assert [job.result() for job in jobs] == ["done 0", "done 1", "done 2"]
    finally:
        scheduler = SlurmScheduler()
        for job in jobs:
            scheduler.cancel(job.job_id)
