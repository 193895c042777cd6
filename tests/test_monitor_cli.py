"""`guarded-sbatch monitor`: the one-shot JSON, and the watch loop in a terminal."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cli_runner import run_cli
from e2e_helpers import EXAMPLE, make_project, wait_for
from guarded_sbatch.scheduler.interface import JobState, SubmitRequest
from guarded_sbatch.scheduler.local import LocalScheduler


def _train(folder: Path, *extra: str) -> Path:
    log = folder / "train.log"
    with open(log, "w", encoding="utf-8") as handle:
        subprocess.run(
            [sys.executable, str(EXAMPLE / "train.py"), "--config", str(EXAMPLE / "configs" / "synthetic-tanh-mlp.yaml"),
             "--logdir", str(folder / "runs" / "a"), "--step-seconds", "0", *extra],
            stdout=handle, check=True, timeout=120,
        )
    return log


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    healthy = tmp_path_factory.mktemp("healthy")
    broken = tmp_path_factory.mktemp("broken")
    _train(healthy, "--steps", "400")
    _train(broken, "--steps", "300", "--diverge-at", "100")
    return {"healthy": healthy, "broken": broken}


def _once(*args: str, cwd: Path) -> dict:
    result = run_cli(["monitor", "--once", "--json", *args], cwd=cwd)
    payload = json.loads(result.stdout)
    assert result.returncode == {"CONTINUE": 0, "WAIT": 10, "STOP": 11}[payload["decision"]], result.stderr
    return payload


@pytest.mark.parametrize("how", ["tb", "log", "folder"])
def test_one_shot_json_on_a_broken_run(runs: dict[str, Path], how: str) -> None:
    folder = runs["broken"]
    args = {"tb": ["--tb", "runs/a"], "log": ["--log", "train.log"], "folder": ["."]}[how]
    payload = _once(*args, cwd=folder)
    assert payload["decision"] == "STOP"
    assert payload["reason"] in {"non_finite_loss", "divergence", "hidden_nan"}
    assert payload["data_source"] == ("log_fallback" if how == "log" else "tensorboard_ok")
    assert isinstance(payload["last_step"], int) and payload["last_step"] >= 100
    assert payload["anomalies"] and {"kind", "metric", "step"} <= set(payload["anomalies"][0])


def test_one_shot_json_on_a_healthy_run(runs: dict[str, Path]) -> None:
    payload = _once("--tb", "runs/a", "--log", "train.log", cwd=runs["healthy"])
    assert payload["decision"] == "CONTINUE" and payload["data_source"] == "tensorboard_ok"
    assert payload["last_step"] == 400


def test_no_data_is_wait_never_stop(tmp_path: Path) -> None:
    (tmp_path / "empty.log").write_text("", encoding="utf-8")
    (tmp_path / "runs" / "not-yet").mkdir(parents=True)  # a run that has not written yet
    payload = _once("--log", "empty.log", "--tb", "runs/not-yet", cwd=tmp_path)
    assert payload["decision"] == "WAIT" and payload["data_source"] == "unreachable"


def test_monitor_watches_a_local_job_and_stops_it(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    scheduler = LocalScheduler(project.state_dir / "local-jobs")
    import os

    old = os.environ.get("GUARDED_SBATCH_STATE_DIR")
    job_id = scheduler.submit(SubmitRequest(Path("train.sh"), script_args=("--steps", "3000", "--diverge-at", "40"),
                                            workdir=project.root, env={"PATH": project.env["PATH"]}))
    assert old == os.environ.get("GUARDED_SBATCH_STATE_DIR")
    result = project.cli("monitor", "--job", job_id, "--backend", "local", "--tb",
                         "runs/synthetic-tanh-mlp-bs64-lr5e-2", "--fast-interval", "1", timeout=120)
    assert result.returncode == 0, result.stderr
    assert "FINAL_SUMMARY" in result.stdout and "Decision: STOP" in result.stdout
    assert wait_for(lambda: scheduler.state(job_id).is_terminal, 30) and scheduler.state(job_id) is JobState.CANCELLED


def test_monitor_without_anything_to_read_is_bad_usage(tmp_path: Path) -> None:
    result = run_cli(["monitor", "--once"], cwd=tmp_path)
    assert result.returncode == 2 and "monitor needs something to read" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_crash_in_the_log_stops_while_tensorboard_is_the_judged_source(runs: dict[str, Path], tmp_path: Path) -> None:
    """TensorBoard outranks the job's log and its last points are healthy; the log ends in a CUDA OOM."""
    tb = runs["healthy"] / "runs" / "a"
    log = tmp_path / "slurm-9.out"
    log.write_text((runs["healthy"] / "train.log").read_text() + (
        "Traceback (most recent call last):\n  File \"train.py\", line 88, in <module>\n    loss.backward()\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total capacity)\n"))
    payload = _once("--tb", str(tb), "--log", str(log), cwd=tmp_path)
    assert payload["data_source"].startswith("tensorboard"), payload
    assert payload["decision"] == "STOP" and payload["reason"] == "crashed", payload
    assert "CUDA out of memory" in payload["anomalies"][0]["message"], payload
    clean = _once("--tb", str(tb), "--log", str(runs["healthy"] / "train.log"), cwd=tmp_path)
    assert clean["decision"] != "STOP", clean


def test_once_exit_code_is_the_decision_and_a_missing_path_is_bad_usage(runs: dict[str, Path], tmp_path: Path) -> None:
    codes = {}
    for name, args in (("healthy", ["--tb", "runs/a"]), ("broken", ["--tb", "runs/a"])):
        codes[name] = run_cli(["monitor", "--once", *args], cwd=runs[name]).returncode
    (tmp_path / "runs" / "empty").mkdir(parents=True)
    codes["empty"] = run_cli(["monitor", "--once", "--tb", "runs/empty"], cwd=tmp_path).returncode
    assert codes == {"healthy": 0, "broken": 11, "empty": 10}
    for flag in ("--tb", "--log", "--wandb"):
        typo = run_cli(["monitor", "--once", flag, "runs/typo"], cwd=tmp_path)
        assert typo.returncode == 2 and typo.stdout == "", typo
        assert typo.stderr.count("\n") == 1 and f"{flag} runs/typo: no such file or folder" in typo.stderr
        assert str(tmp_path) in typo.stderr  # relative to where it ran
    helped = run_cli(["monitor", "--help"]).stdout
    assert "0 CONTINUE, 10 WAIT, 11 STOP" in " ".join(helped.split())


def test_monitor_job_follows_the_config_and_sees_the_job_end(tmp_path: Path) -> None:
    project = make_project(tmp_path, fast_interval=1.0, job_poll=2.0)  # the user config's cadence
    scheduler = LocalScheduler(project.state_dir / "local-jobs")
    job_id = scheduler.submit(SubmitRequest(Path("train.sh"), script_args=("--steps", "80", "--step-seconds", "0.05"),
                                            workdir=project.root, env={"PATH": project.env["PATH"]}))
    result = project.cli("monitor", "--job", job_id, "--backend", "local", "--tb",
                         "runs/synthetic-tanh-mlp-bs64-lr5e-2", timeout=90)  # no interval flags
    assert result.returncode == 0, result.stderr
    assert "checks the metrics every 1 s" in result.stderr and "asks the scheduler at most every 2 s" in result.stderr
    assert scheduler.state(job_id) is JobState.COMPLETED
    assert "COMPLETED" in result.stdout, result.stdout[-2000:]  # it saw the job end and left by itself
