"""Adding a scheduler backend is one module plus one registry line (docs/architecture.md, "Where a new piece goes"):

    + scheduler/toy.py                 (here tests/toy_backend.py) ToyScheduler(SchedulerDefaults): each job a plain
                                       subprocess, ids `toy-N`, its own state files; its traits one BackendTraits
    + scheduler/__init__.py (one line) "toy": "guarded_sbatch.scheduler.toy",   in BACKENDS

The tests do exactly that on a copy of the package (the tree is shared, so the real one is left alone), check that
nothing else differs, and run every process from the copy (PYTHONPATH): a guarded launch through the toy backend,
named by --guard-backend toy or by the user's config (`scheduler = "toy"`): pre-flight, the training job submitted,
its sidecar submitted `after` it, the sidecar reading the run's TensorBoard
events as the toy's job, a diverging run STOPPED and cancelled through the toy backend, a healthy one completing and
its sidecar leaving; `status` says who ended each. The toy backend is a real one: nothing here is a mock.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from e2e_helpers import Project, make_project, submitted_job_id, wait_for
from package_copy import PACKAGE, changed_lines, differences, package_copy

from guarded_sbatch.scheduler.interface import JobState

TESTS = Path(__file__).resolve().parent
REGISTRY_LINE = '    "toy": "guarded_sbatch.scheduler.toy",\n'
TB = "runs/synthetic-tanh-mlp-bs64-lr5e-2"


@pytest.fixture(scope="module")
def package_with_toy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of guarded_sbatch with the toy backend: one module added, one line added to the registry."""
    last = '    "local": "guarded_sbatch.scheduler.local",\n'
    return package_copy(tmp_path_factory.mktemp("package"), "scheduler/toy.py", (TESTS / "toy_backend.py").read_text(),
                        "scheduler/__init__.py", [(last, last + REGISTRY_LINE)])


def _toy_project(tmp_path: Path, package: Path, *, configured: bool = False) -> Project:
    """The example project, its CLI and every process it starts run from the copy; `configured`: the user's config
    names the toy backend (`scheduler = "toy"`), else the launch names it (--guard-backend toy)."""
    project = make_project(tmp_path, fast_interval=1.0, job_poll=2.0)
    if configured:
        config = Path(project.env["GUARDED_SBATCH_USER_CONFIG"])
        config.write_text('scheduler = "toy"\n' + config.read_text(), encoding="utf-8")
    env = {**project.env, "PYTHONPATH": str(package)}
    env.pop("GUARDED_SBATCH_BACKEND", None)
    return Project(project.root, env, project.name)


def _in_copy(package: Path, code: str) -> str:
    result = subprocess.run([sys.executable, "-P", "-c", code], env={**os.environ, "PYTHONPATH": str(package)},
                            capture_output=True, text=True, timeout=60, check=True)
    return result.stdout


def _toy(project: Project, package: Path, code: str) -> object:
    """A question to the toy backend, asked from the copy as the project's processes would."""
    out = subprocess.run([sys.executable, "-P", "-c", "import json; from guarded_sbatch.scheduler import get_scheduler;"
                          f" toy = get_scheduler('toy'); print(json.dumps({code}))"],
                         env=project.env, capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout)


def test_the_new_backend_is_one_module_and_one_registry_line(package_with_toy: Path) -> None:
    added, changed = differences(PACKAGE, package_with_toy / "guarded_sbatch")
    assert added == ["scheduler/toy.py"] and changed == ["scheduler/__init__.py"], (added, changed)
    assert changed_lines("scheduler/__init__.py", package_with_toy) == ["+" + REGISTRY_LINE]
    # every list of backends reads the registry: monitor's --backend, the toy's traits
    listed = _in_copy(package_with_toy, "from guarded_sbatch.scheduler import backend_names, get_scheduler as g; "
                      "t = g('toy').traits; print(backend_names(), t.cancel_command, t.process_groups_here, "
                      "t.sbatch_native)")
    assert listed.split() == ["('slurm',", "'local',", "'toy')", "toy", "cancel", "True", "False"], listed
    helped = subprocess.run([sys.executable, "-m", "guarded_sbatch", "monitor", "--help"], capture_output=True,
                            text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(package_with_toy)})
    assert "toy" in helped.stdout, helped.stdout


def test_a_guarded_launch_through_the_toy_backend_stops_a_diverging_run_and_lets_a_healthy_one_end(
        tmp_path: Path, package_with_toy: Path) -> None:
    project = _toy_project(tmp_path / "diverging", package_with_toy)
    healthy = _toy_project(tmp_path / "healthy", package_with_toy, configured=True)
    # two launches, running side by side: pre-flight, the training job, its sidecar `after` it — all the toy's
    launched = project.cli("--guard-backend", "toy", "--guard-tb", TB, "train.sh", "--steps", "3000", "--diverge-at", "60")
    assert launched.returncode == 0, launched.stderr
    fine = healthy.cli("--guard-tb", TB, "train.sh", "--steps", "150", "--step-seconds", "0.02")
    assert fine.returncode == 0, fine.stderr
    job, ok_job = submitted_job_id(launched.stdout), submitted_job_id(fine.stdout)
    assert job.startswith("toy-") and ok_job.startswith("toy-"), (job, ok_job)  # the toy's own ids
    record, ok_record = project.run_record(job), healthy.run_record(ok_job)
    assert record["backend"] == "toy" and record["sidecar_id"].startswith("toy-")

    # the diverging run: its sidecar reads the run's events, STOPs it and cancels it through the toy backend
    state = f"toy.state({job!r}).value"
    final = wait_for(lambda: (s := _toy(project, package_with_toy, state)) not in ("PENDING", "RUNNING") and s, 90,
                     interval=1.0, what="the diverging run to end")
    assert final == JobState.CANCELLED.value, final
    sidecar = record["sidecar_id"]
    wait_for(lambda: _toy(project, package_with_toy, f"toy.state({sidecar!r}).is_terminal"), 60, interval=1.0,
             what="its sidecar to leave")
    output = project.sidecar_output(job)  # where the request's `output` put it: the run's folder, sidecar-toy-N.out
    assert "- Decision: STOP" in output and "FINAL_SUMMARY" in output, output
    started = _toy(project, package_with_toy, f"[toy.info({job!r}).start_time, toy.info({sidecar!r}).start_time]")
    assert isinstance(started, list) and started[0] <= started[1], started  # the sidecar ran `after` the job started
    evidence = json.loads((project.state_dir / "runs" / record["run_id"] / "evidence" / "evidence.json").read_text())
    assert evidence["verdict"]["decision"] == "STOP", evidence["verdict"]
    assert TB in json.dumps(evidence), "the evidence names the run's TensorBoard folder"

    # the healthy run: completes, its sidecar sees it end and leaves, no STOP
    ok_state = f"toy.state({ok_job!r}).value"
    ok_final = wait_for(lambda: (s := _toy(healthy, package_with_toy, ok_state)) not in ("PENDING", "RUNNING") and s,
                        60, interval=1.0, what="the healthy run to end")
    assert ok_final == JobState.COMPLETED.value, ok_final
    ok_sidecar = ok_record["sidecar_id"]
    wait_for(lambda: _toy(healthy, package_with_toy, f"toy.state({ok_sidecar!r}).is_terminal"), 60, interval=1.0,
             what="the healthy run's sidecar to leave")
    ok_output = healthy.sidecar_output(ok_job)
    assert "Decision: STOP" not in ok_output and "ended COMPLETED" in ok_output, ok_output

    # status, from the records and the toy's states: the guard ended one, the other ended by itself
    for who, ran, stopper in ((project, job, "guard"), (healthy, ok_job, None)):
        rows = {row["job_id"]: row for row in json.loads(who.cli("status", "--json", check=True).stdout)["runs"]}
        assert rows[ran]["backend"] == "toy" and rows[ran]["stopped_by"] == stopper, rows[ran]
