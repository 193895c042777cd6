"""One launch pipeline (launch/pipeline.py) under every front end: the sbatch form, a launcher command, `run --` and
GuardedExecutor record the same run (sources, judge settings, waivers, audit) for the same launch; a job array is a
run per task, each with its own expanded sources (every --array form, from the command line or #SBATCH)."""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from pathlib import Path

import pytest

from e2e_helpers import wait_for
from guarded_sbatch.core.config import Config
from guarded_sbatch.core.errors import UsageError
from guarded_sbatch.sbatch.argv import split_sbatch_argv
from guarded_sbatch.sbatch.array import parse_array_spec
from guarded_sbatch.launch.preflight import run_preflight
from package_extras import recorded_tb, tb_folders

WAIVER = ("run-name", "a probe of the launch front ends")
JUDGE = "[judge]\nnonfinite_loss_points = 3\n"
TRAIN = "import sys\nprint('step 1 loss 0.5', flush=True)\n"


def _project(root: Path, name: str) -> dict[str, str]:
    """A tiny project (a config naming its TensorBoard folder, a trainer that ends at once) and the environment of
    its launches: its own state folder, a user config with a [judge] table, a site config with an audit log."""
    (root / "configs").mkdir(parents=True)
    (root / "runs").mkdir()
    (root / "configs" / "probe.yaml").write_text("logdir: runs/probe\nlr: 0.01\nmax_steps: 10\n")
    (root / "train.py").write_text(TRAIN)
    (root / "train.sh").write_text(f"#!/bin/bash\n#SBATCH --job-name={name}\n#SBATCH --output=slurm-%j.out\n"
                                   "python train.py --config configs/probe.yaml\n")
    user, site = root.parent / f"{root.name}-user.toml", root.parent / f"{root.name}-site.toml"
    user.write_text("[sidecar]\nfast_interval_seconds = 1.0\njob_poll_seconds = 2.0\nmem = \"300M\"\n" + JUDGE)
    site.write_text(f'[audit]\nlog = "{root.parent / (root.name + "-audit.log")}"\n')
    return {**os.environ, "GUARDED_SBATCH_STATE_DIR": str(root.parent / f"{root.name}-state"),
            "GUARDED_SBATCH_USER_CONFIG": str(user), "GUARDED_SBATCH_SITE_CONFIG": str(site),
            "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}


def _cli(root: Path, env: dict[str, str], *args: str) -> None:
    import subprocess

    result = subprocess.run([sys.executable, "-m", "guarded_sbatch", *args], cwd=root, env=env, capture_output=True,
                            text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr


def _executor(root: Path, env: dict[str, str], name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from guarded_sbatch.launch.executor import GuardedExecutor

    for key in ("GUARDED_SBATCH_STATE_DIR", "GUARDED_SBATCH_USER_CONFIG", "GUARDED_SBATCH_SITE_CONFIG", "PATH"):
        monkeypatch.setenv(key, env[key])
    monkeypatch.chdir(root)
    executor = GuardedExecutor(folder="logs", run_name=name, tb_dir="runs/guarded", config="configs/probe.yaml",
                               waivers=dict([WAIVER]), cluster="local")
    job = executor.submit(len, "four")
    assert job.result() == 4


def _what_was_recorded(root: Path, env: dict[str, str]) -> dict[str, object]:
    """The one run's record, with its project folder written as <root>, and the site's audit lines."""
    [run_json] = (Path(env["GUARDED_SBATCH_STATE_DIR"]) / "runs").glob("*/run.json")
    record = json.loads(run_json.read_text())
    sources = record["sources"]
    audit = [json.loads(line) for line in (root.parent / f"{root.name}-audit.log").read_text().splitlines()]
    seen = {
        "tb_paths": record["tb_paths"],
        "planned": [s["locator"] for s in sources["specs"] if s["kind"] == "tensorboard"],
        "from": [s.get("origin") for s in sources["specs"] if s["kind"] == "tensorboard"],
        "output_dirs": sources["output_dirs"], "judge": record["judge"], "waivers": record["waivers"],
        "config_path": record["config_path"], "total_steps": record["total_steps"],
        "audit": [(a["event"], a.get("check"), a.get("reason"), a.get("waivers")) for a in audit],
        "audited_job": {a.get("job") for a in audit} == {record["job_id"]},
        "watched": bool(record["sidecar_id"] or record["monitor_id"]),
    }
    return json.loads(json.dumps(seen).replace(str(root), "<root>"))


def test_every_front_end_records_the_same_run_for_the_same_launch(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    name = "run-1"  # a session-local label: the run-name check fails, and each front end waives it the same way
    guard = ["--guard-backend=local", "--guard-tb=runs/guarded", f"--guard-waive={WAIVER[0]}={WAIVER[1]}"]
    launches = {
        "sbatch form": lambda root, env: _cli(root, env, *guard, "train.sh"),
        "launcher command": lambda root, env: _cli(root, env, *guard, f"--job-name={name}", "--output=slurm-%j.out",
                                                   "python", "train.py", "--config", "configs/probe.yaml"),
        "run --": lambda root, env: _cli(root, env, "run", *guard, f"--job-name={name}", "--", "python", "train.py",
                                         "--config", "configs/probe.yaml"),
        "GuardedExecutor": lambda root, env: _executor(root, env, name, monkeypatch),
    }
    recorded = {}
    for front_end, launch in launches.items():
        root = tmp_path / front_end.replace(" ", "-").replace("--", "run")
        env = _project(root, name)
        launch(root, env)
        recorded[front_end] = _what_was_recorded(root, env)
    first = recorded["sbatch form"]
    assert first["planned"] == ["<root>/runs/probe"] and first["tb_paths"] == ["<root>/runs/guarded"]
    assert first["judge"] == {"nonfinite_loss_points": 3}
    assert first["waivers"] == [{"check": WAIVER[0], "reason": WAIVER[1]}]
    assert first["audit"] == [["launch", None, None, 1], ["waiver", *WAIVER, None]] and first["audited_job"]
    assert first["config_path"] == "<root>/configs/probe.yaml" and first["total_steps"] == 10 and first["watched"]
    for front_end, seen in recorded.items():
        assert seen == first, front_end


def test_every_array_form_names_its_tasks() -> None:
    assert parse_array_spec("0-3").tasks == (0, 1, 2, 3)
    assert parse_array_spec("1,3,5").tasks == (1, 3, 5)
    assert parse_array_spec("0-15:4").tasks == (0, 4, 8, 12)
    spec = parse_array_spec("0-99%4")
    assert spec.count == 100 and spec.throttle == 4 and spec.task_ids("77")[:2] == ["77_0", "77_1"]
    for bad in ("x", "3-1", "0-3%0", "1,,2"):
        with pytest.raises(UsageError, match="--array="):
            parse_array_spec(bad)


@pytest.mark.parametrize(("where", "spec", "tasks"), [("argv", "0-3", (0, 1, 2, 3)), ("script", "1,3,5", (1, 3, 5)),
                                                      ("env", "0-15:4", (0, 4, 8, 12)), ("argv", "0-99%4", None)])
def test_each_task_of_an_array_has_its_own_sources(tmp_path: Path, where: str, spec: str,
                                                   tasks: tuple[int, ...] | None) -> None:
    """%A/%a of the output pattern and $SLURM_ARRAY_TASK_ID in the launcher line are each task's own."""
    root = tmp_path / "project"
    env = _project(root, "lr-sweep-mlp")
    directive = f"#SBATCH --array={spec}\n" if where == "script" else ""
    (root / "train.sh").write_text(f"#!/bin/bash\n#SBATCH --job-name=lr-sweep-mlp\n{directive}"
                                   "#SBATCH --output=logs/%x-%A_%a.out\nLR_DIR=runs/lr-${SLURM_ARRAY_TASK_ID}\n"
                                   "python train.py --logdir \"$LR_DIR\" --seed $SLURM_ARRAY_TASK_ID\n")
    argv = [f"--array={spec}"] if where == "argv" else []
    environ = {"PATH": env["PATH"], **({"SBATCH_ARRAY_INX": spec} if where == "env" else {})}
    report = run_preflight(split_sbatch_argv([*argv, "train.sh"]), Config(), None, cwd=root, env=environ)
    plan = report.details["source_plan"]
    assert plan.array is not None and plan.array.tasks == (tasks or tuple(range(100)))
    for task in plan.array.tasks[:4]:
        sources = plan.for_job(f"900_{task}")
        assert sources.stdout == str(root / "logs" / f"lr-sweep-mlp-900_{task}.out")
        assert tb_folders(sources) == [str(root / "runs" / f"lr-{task}")], sources.specs
    assert not any("needs a shell" in item for item in plan.sources.unresolved), plan.sources.unresolved
    assert any(f"a job array of {plan.array.count} tasks: a guarded run each" in note for note in report.notes)


def test_outside_an_array_the_task_variable_is_not_taken_for_a_task(tmp_path: Path) -> None:
    root = tmp_path / "project"
    env = _project(root, "lr-sweep-mlp")
    (root / "train.sh").write_text("#!/bin/bash\n#SBATCH --job-name=lr-sweep-mlp\n"
                                   "python train.py --logdir runs/lr-$SLURM_ARRAY_TASK_ID\n")
    report = run_preflight(split_sbatch_argv(["train.sh"]), Config(), None, cwd=root, env={"PATH": env["PATH"]})
    plan = report.details["source_plan"]
    assert plan.array is None and tb_folders(plan.for_job("901")) == []
    assert any("needs a shell" in item for item in plan.sources.unresolved)


@pytest.mark.slurm
def test_an_array_on_slurm_records_a_run_per_task_with_its_own_output(tmp_path: Path, slurm_cluster: None) -> None:
    from guarded_sbatch.scheduler.slurm import SlurmScheduler

    root = tmp_path / "project"
    env = _project(root, "unused")
    name = f"lr-sweep-mlp-{uuid.uuid4().hex[:6]}"
    (root / "logs").mkdir()
    (root / "train.sh").write_text("#!/bin/bash\n#SBATCH --output=logs/%x-%A_%a.out\n#SBATCH --time=2\n"
                                   "python train.py --config configs/probe.yaml --logdir runs/lr-$SLURM_ARRAY_TASK_ID\n")
    started = time.time()
    import subprocess

    result = subprocess.run([sys.executable, "-m", "guarded_sbatch", "--guard-backend=slurm", "--array", "0-3", "-J",
                             name, "train.sh"], cwd=root, env=env, capture_output=True, text=True, timeout=120,
                            stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    job = result.stdout.split()[-1]
    assert result.stdout.strip() == f"Submitted batch job {job}" and "array watcher job" in result.stderr
    assert "(4 tasks, a run each)" in result.stderr, result.stderr
    records = [json.loads(p.read_text()) for p in (Path(env["GUARDED_SBATCH_STATE_DIR"]) / "runs").glob("*/run.json")]
    try:
        assert sorted(r["job_id"] for r in records) == [f"{job}_{task}" for task in range(4)]
        for record in records:
            task = record["job_id"].split("_")[1]
            assert record["run_name"] == name and record["submitted_at"] >= started - 1
            assert record["sources"]["stdout"] == str(root / "logs" / f"{name}-{job}_{task}.out")
            assert recorded_tb(record) == [str(root / "runs" / f"lr-{task}")]
            assert record["monitor_id"] and not record["sidecar_id"]  # one watcher for the whole array
        assert len({r["monitor_id"] for r in records}) == 1
        slurm = SlurmScheduler(state_dir=tmp_path / "test-slurm-cache")
        wait_for(lambda: all(slurm.state(r["job_id"]).is_terminal for r in records), 120, 1.0, "the tasks to end")
        for record in records:  # each task wrote the output its record names
            assert "step 1 loss 0.5" in Path(record["sources"]["stdout"]).read_text()
    finally:
        SlurmScheduler(state_dir=tmp_path / "test-slurm-cache").cancel(job)


@pytest.mark.parametrize("backend", ["local", pytest.param("slurm", marks=pytest.mark.slurm)])
def test_the_python_api_example_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                request: pytest.FixtureRequest, backend: str) -> None:
    """docs/python-api.md's `executor = GuardedExecutor(folder="logs/%j", run_name=...)`, then `submit(fn, ...)`:
    a function with no config file is launched (its launcher line is what is diffed). Where Slurm answers the line
    as written goes to Slurm; the local backend is chosen as a user without Slurm would (GUARDED_SBATCH_BACKEND)."""
    from guarded_sbatch.launch.executor import GuardedExecutor

    doc = (Path(__file__).resolve().parents[1] / "docs" / "python-api.md").read_text(encoding="utf-8")
    example = next(line for line in doc.splitlines() if line.startswith("executor = GuardedExecutor("))
    root = tmp_path / "project"
    env = _project(root, "unused")
    for key in ("GUARDED_SBATCH_STATE_DIR", "GUARDED_SBATCH_USER_CONFIG", "PATH"):
        monkeypatch.setenv(key, env[key])
    monkeypatch.delenv("GUARDED_SBATCH_SITE_CONFIG", raising=False)
    if backend == "slurm":
        request.getfixturevalue("slurm_cluster")
        monkeypatch.delenv("GUARDED_SBATCH_BACKEND", raising=False)
    else:
        monkeypatch.setenv("GUARDED_SBATCH_BACKEND", "local")
    monkeypatch.chdir(root)
    namespace: dict[str, object] = {"GuardedExecutor": GuardedExecutor}
    exec(example, namespace)  # the documented line, run as a reader would
    executor = namespace["executor"]
    assert isinstance(executor, GuardedExecutor) and executor.guard_backend == backend
    job = executor.submit(sum, [1, 2, 3])
    assert job.result() == 6
    [run_json] = (Path(env["GUARDED_SBATCH_STATE_DIR"]) / "runs").glob("*/run.json")
    record = json.loads(run_json.read_text())
    assert record["launched_by"] == "submitit" and record["job_id"] == job.job_id and record["sidecar_id"]


def test_every_front_end_launches_through_the_pipeline_and_nothing_else() -> None:
    """Nothing about a launch is assembled twice: each front end plans and carries out its launch with
    launch/pipeline.py, never submit_guarded itself, and imports no other module's private helpers."""
    import ast

    package = Path(__file__).resolve().parents[1] / "wrapper" / "guarded_sbatch"
    for front_end in ("cli/launch.py", "cli/run.py", "launch/executor.py"):
        tree = ast.parse((package / front_end).read_text(encoding="utf-8"))
        imported = {(node.module, alias.name) for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                    for alias in node.names}
        assert {("guarded_sbatch.launch.pipeline", "plan_launch"),
                ("guarded_sbatch.launch.pipeline", "carry_out")} <= imported, front_end
        assert not any(name == "submit_guarded" or name.startswith("_") for _, name in imported), front_end


def test_the_executors_hints_speak_its_keywords() -> None:
    from guarded_sbatch.launch.executor import api_words

    hint = api_words('no config file; name it with --guard-config FILE and the reference with --guard-reference, '
                     'or waive with --guard-waive config-diff="REASON"; --guard-tb names the folder; --guard-restart')
    assert hint == ('no config file; name it with config="FILE" and the reference with reference=..., or waive with '
                    'waivers={"config-diff": "REASON"}; tb_dir=... names the folder; restart=True')


def test_map_array_on_the_local_backend_is_a_run_per_call_with_one_watcher(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from guarded_sbatch.launch.executor import GuardedExecutor, GuardedSchedulerJob

    root = tmp_path / "project"
    env = _project(root, "unused")
    for key in ("GUARDED_SBATCH_STATE_DIR", "GUARDED_SBATCH_USER_CONFIG", "PATH"):
        monkeypatch.setenv(key, env[key])
    monkeypatch.delenv("GUARDED_SBATCH_SITE_CONFIG", raising=False)
    monkeypatch.chdir(root)
    executor = GuardedExecutor(folder="logs", run_name=f"pow-sweep-mlp-{uuid.uuid4().hex[:6]}", cluster="local")
    jobs = executor.map_array(pow, [1, 2, 3], [2, 2, 2])
    assert all(isinstance(job, GuardedSchedulerJob) for job in jobs)
    assert [job.result() for job in jobs] == [1, 4, 9]
    records = [json.loads((Path(env["GUARDED_SBATCH_STATE_DIR"]) / "runs" / run_id / "run.json").read_text())
               for run_id in executor.run_ids]
    assert [r["job_id"] for r in records] == [job.job_id for job in jobs] and all("_" in r["job_id"] for r in records)
    assert len({r["monitor_id"] for r in records}) == 1 and all(r["monitor_id"] and not r["sidecar_id"] for r in records)


def test_every_executor_keyword_stands_for_a_real_guard_option(tmp_path: Path) -> None:
    """The executor's keywords become guard options on its launch's argv: each must be one the CLI parses."""
    from guarded_sbatch.sbatch.guard_options import executor_keywords

    for keyword, row in executor_keywords().items():
        value = {"flag": "", "waiver": "eta=known", "choice": row.choices[:1] and row.choices[0],
                 "positive_float": "1.5", "positive_int": "2"}.get(row.kind, str(tmp_path / "x"))
        words = [f"{row.flag}={value}" if value else row.flag]
        launch = split_sbatch_argv([*words, "train.sh"])
        assert launch.guard_words and launch.script == Path("train.sh"), (keyword, row.flag)
