"""Adding a metric source is one module plus one registry line (docs/architecture.md, "Where a new piece goes"):

    + sources/jsonl.py                 (here tests/jsonl_source.py) JsonLinesSource(SourceBase), is_metrics_file, own_files,
                                       LAUNCH = LaunchKind("jsonl", uses=..., path_keys=("metrics_jsonl",), place="file"),
                                       KIND = SourceKind("jsonl", "--jsonl", ..., matches=..., run_files=..., launch=LAUNCH)
    + sources/kinds.py (one line)     register(jsonl.KIND)

and through the real CLI the new kind gets its `monitor` flag, is found under a folder, is read by a guarded
run's sidecar from the run's record (the launch writes it into RunSources.specs), is shown by `show` and is
deleted by `kill` - with no other file touched; and the pre-flight detects it and the launch resolves its file
from the run's config (its LaunchKind, handed to core by `register`).
"""

from __future__ import annotations

import io
import json
import math
import os
import time
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import jsonl_source
import pytest
from e2e_helpers import make_project

from guarded_sbatch.cli.main import main
from guarded_sbatch.core import source_kinds
from guarded_sbatch.core.config import Config
from guarded_sbatch.core.registry import create_run, find_run
from guarded_sbatch.core.run_sources import RunSources, SourceSpec
from guarded_sbatch.core.sbatch.argv import split_sbatch_argv
from guarded_sbatch.launch.preflight import run_preflight
from guarded_sbatch.launch.results import CheckStatus
from guarded_sbatch.launch.source_plan import SourcePlan
from guarded_sbatch.sidecar.settings import SidecarSettings
from guarded_sbatch.sidecar.source_set import SourceSet
from guarded_sbatch.scheduler.interface import JobState, SubmitRequest
from guarded_sbatch.scheduler.local import LocalScheduler
from guarded_sbatch.sources import kinds


@pytest.fixture()
def jsonl_kind() -> Iterator[kinds.SourceKind]:
    kind = kinds.register(jsonl_source.KIND)  # the one registry line
    try:
        yield kind
    finally:
        kinds.unregister("jsonl")


@pytest.fixture()
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GUARDED_SBATCH_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "user-config.toml").write_text("")
    monkeypatch.setenv("GUARDED_SBATCH_USER_CONFIG", str(tmp_path / "user-config.toml"))
    monkeypatch.delenv("GUARDED_SBATCH_SITE_CONFIG", raising=False)
    return tmp_path / "state"


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def write_metrics(path: Path, *, nan_from: int | None = None, steps: int = 400) -> None:
    rows = [{"step": s, "loss": math.nan if nan_from is not None and s >= nan_from else 2.0 * math.exp(-s / 300) + 0.1}
            for s in range(0, steps, 10)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))  # json writes NaN as NaN


def test_a_source_added_through_the_registry_gets_its_flag_and_discovery(tmp_path: Path, jsonl_kind: object) -> None:
    log = tmp_path / "exp" / "metrics.jsonl"
    write_metrics(log)
    code, out, _ = cli("monitor", "--once", "--json", "--jsonl", str(log))
    verdict = json.loads(out)
    assert code == 0 and verdict["decision"] == "CONTINUE" and verdict["last_step"] == 390
    assert verdict["data_source"] == "log_fallback"
    code, out, _ = cli("monitor", "--once", "--json", str(tmp_path / "exp"))  # found under the folder, by `matches`
    assert json.loads(out)["last_step"] == 390
    write_metrics(log, nan_from=300)
    verdict = json.loads(cli("monitor", "--once", "--json", "--jsonl", str(log))[1])
    assert verdict["decision"] == "STOP" and verdict["reason"] == "non_finite_loss"


def test_a_guarded_run_of_the_new_kind_is_read_by_its_sidecar_shown_and_killed(
        tmp_path: Path, state: Path, jsonl_kind: object) -> None:
    project = tmp_path / "project"
    project.mkdir()
    scheduler = LocalScheduler()
    runs = {}
    for name, nan_from in (("synthetic-jsonl-healthy", None), ("synthetic-jsonl-nan", 200)):
        metrics = project / "runs" / name / "metrics.jsonl"
        write_metrics(metrics, nan_from=nan_from)
        script = project / f"{name}.sh"
        script.write_text("#!/bin/bash\nexec sleep 120\n")
        job_id = scheduler.submit(SubmitRequest(script=script, workdir=project))
        started = time.monotonic()
        while scheduler.state(job_id) is not JobState.RUNNING:  # a sidecar starts with its job (after:JOB)
            assert time.monotonic() - started < 30, scheduler.state(job_id)
            time.sleep(0.1)
        # what a launch records: the new kind's spec among the run's sources
        sources = RunSources(since=time.time() - 5, workdir=str(project),
                             specs=[SourceSpec("jsonl", str(metrics), "the run's config")])
        record = create_run(name, "local", job_id, submit_dir=str(project), script=str(script),
                            sources=sources.to_json())
        runs[name] = (record, metrics)

    # the NaN run's sidecar, as its sidecar job runs it: reads the record's jsonl source, STOPs, cancels the job
    record, _ = runs["synthetic-jsonl-nan"]
    code, out, _ = cli("sidecar", "--job", record.job_id, "--backend", "local", "--run-dir", str(record.folder),
                       "--fast-interval", "1", "--full-interval", "5", "--job-poll", "1")
    assert code == 0 and "Decision: STOP" in out and "FINAL_SUMMARY" in out, out
    deadline = time.monotonic() + 30
    while scheduler.state(record.job_id) is not JobState.CANCELLED:
        assert time.monotonic() < deadline, scheduler.state(record.job_id)
        time.sleep(0.2)
    seen = json.loads((record.folder / "run.json").read_text())["sources"]["seen"]  # what it learned of the job
    assert scheduler.info(record.job_id).pgid in seen["pids"] and seen["pid_hosts"], seen

    # `show` of each run in the one project: its own recorded source, judged now
    for name, decision in (("synthetic-jsonl-healthy", "CONTINUE"), ("synthetic-jsonl-nan", "STOP")):
        record, metrics = runs[name]
        code, out, _ = cli("show", name, "--json")
        view = json.loads(out)
        assert code == 0 and view["source"] == str(metrics) and view["decision_now"] == decision, view
        assert "loss" in view["series"]

    # `kill` deletes the killed run's own metrics file (the kind's run_files), never the other run's
    code, _, err = cli("kill", "synthetic-jsonl-nan", "--yes")
    assert code == 1 and "nothing stopped" in err, err  # its sidecar had stopped it already; the cleanup is done
    assert not runs["synthetic-jsonl-nan"][1].exists() and runs["synthetic-jsonl-healthy"][1].exists()
    assert find_run("synthetic-jsonl-nan").ended == "killed"
    scheduler.cancel(runs["synthetic-jsonl-healthy"][0].job_id)


def test_the_registry_names_every_kind_and_refuses_an_unknown_one(tmp_path: Path) -> None:
    assert {"wandb", "tensorboard", "mlflow", "csv", "textlog"} <= set(kinds.KINDS)
    assert [k.flag for k in kinds.flagged_kinds()][:2] == ["--wandb", "--tb"]
    with pytest.raises(kinds.SourceError, match="unknown source kind 'parquet'"):
        kinds.open_source("parquet", tmp_path)
    with pytest.raises(kinds.SourceError, match="unknown source kind 'parquet'"):
        kinds.open_spec(SourceSpec("parquet", str(tmp_path)), lambda: RunSources().writer())


def _submit_sleeper(root: Path) -> tuple[LocalScheduler, str, Path]:
    """A real local job that only sleeps: the live job a launch's record is made for."""
    scheduler = LocalScheduler()
    script = root / "sleep.sh"
    script.write_text("#!/bin/bash\nexec sleep 120\n")
    return scheduler, scheduler.submit(SubmitRequest(script=script, workdir=root)), script


def _wait_running(scheduler: LocalScheduler, job_id: str) -> None:
    started = time.monotonic()
    while scheduler.state(job_id) is not JobState.RUNNING:
        assert time.monotonic() - started < 30, scheduler.state(job_id)
        time.sleep(0.1)


def test_a_kind_added_through_the_registry_is_detected_and_resolved_at_launch(
        tmp_path: Path, state: Path, jsonl_kind: kinds.SourceKind) -> None:
    project = make_project(tmp_path)  # the example project; its config names the run's JSON-lines file
    config = project.root / "configs" / "synthetic-tanh-mlp.yaml"
    config.write_text(config.read_text() + "metrics_jsonl: out/metrics.jsonl\n")
    env = {"PATH": os.environ["PATH"]}
    report = run_preflight(split_sbatch_argv(["train.sh"]), Config(), None, cwd=project.root, env=env)
    metrics = project.root / "out" / "metrics.jsonl"

    # pre-flight detection: the monitoring check names the added kind and where the launch found its file
    monitoring = next(r for r in report.results if r.name == "monitoring")
    trackers = monitoring.details["trackers"]
    assert {"kind": "jsonl", "settings": {"file": str(metrics)}} in trackers, trackers  # type: ignore[operator]
    assert f"jsonl: config key metrics_jsonl names its file {metrics} — file={metrics}" in monitoring.evidence
    assert monitoring.evidence[0].startswith("tensorboard: config key logdir names its folder ")  # the built-in kinds

    # launch resolution: the source plan's specs hold the file with its origin, named in the report's notes
    plan = report.details["source_plan"]
    assert isinstance(plan, SourcePlan)
    assert plan.sources.specs == [SourceSpec("jsonl", str(metrics), "config key metrics_jsonl")]
    assert any(f"jsonl {metrics} (config key metrics_jsonl)" in note for note in report.notes), report.notes

    # the record the launch writes, read by the run's sidecar: the file's points, the NaN among them
    scheduler, job_id, script = _submit_sleeper(project.root)
    try:
        _wait_running(scheduler, job_id)
        sources = plan.for_job(job_id, since=time.time() - 5)
        write_metrics(metrics, nan_from=300)
        settings = SidecarSettings(run_name="r", job_id=None, state_file=tmp_path / "s.json",
                                   evidence_dir=tmp_path / "e", identity=RunSources.from_json(sources.to_json()))
        read = SourceSet(settings, None)
        read.read()
        assert read.active_kind == "jsonl" and str(metrics) in read.files_inspected()
        steps, values = read.history().series("loss")
        assert list(steps)[:3] == [0, 10, 20] and len(values) == 40 and math.isnan(values[-1])

        # `show` judges the recorded spec; `kill` deletes the run's own file (the kind's run_files)
        name = "synthetic-jsonl-launched"
        create_run(name, "local", job_id, submit_dir=str(project.root), script=str(script), sources=sources.to_json())
        code, out, _ = cli("show", name, "--json")
        view = json.loads(out)
        assert code == 0 and view["source"] == str(metrics) and view["decision_now"] == "STOP", view
        code, _, err = cli("kill", name, "--yes")
        assert code == 0, err
        assert not metrics.exists() and find_run(name).ended == "killed"
    finally:
        if not scheduler.state(job_id).is_terminal:
            scheduler.cancel(job_id)

    # detection from the program alone (no key names the file): a script importing the kind's logger
    (project.root / "train.py").write_text("import jsonl_logger\n\njsonl_logger.log(step=0, loss=1.0)\n")
    config.write_text(config.read_text().replace("metrics_jsonl: out/metrics.jsonl\n", ""))
    report = run_preflight(split_sbatch_argv(["train.sh"]), Config(), None, cwd=project.root, env=env)
    monitoring = next(r for r in report.results if r.name == "monitoring")
    assert "jsonl: train.py writes JSON-lines metrics" in monitoring.evidence, monitoring.evidence
    assert report.details["source_plan"].sources.specs == []  # type: ignore[union-attr]


def test_unregistering_an_added_kind_forgets_its_launch_side_too() -> None:
    kinds.register(jsonl_source.KIND)
    assert source_kinds.LAUNCH_KINDS["jsonl"] is jsonl_source.LAUNCH
    kinds.unregister("jsonl")
    assert "jsonl" not in kinds.KINDS and "jsonl" not in source_kinds.LAUNCH_KINDS
    # the registry's kinds reuse core's launch sides; core's other one is detection-only (no reader)
    launched = {kind.name for kind in kinds.KINDS.values() if kind.launch is not None}
    assert all(kinds.KINDS[name].launch is source_kinds.LAUNCH_KINDS[name] for name in launched)
    assert set(source_kinds.LAUNCH_KINDS) - launched == {"neptune"}


def test_a_file_of_an_added_kind_another_run_records_is_never_found_as_a_neighbours(
        tmp_path: Path, state: Path, jsonl_kind: kinds.SourceKind) -> None:
    project = tmp_path / "project"
    theirs = project / "runs" / "theirs" / "metrics.jsonl"
    since = time.time() - 5
    write_metrics(theirs, nan_from=100)  # written since this run started, the one jsonl file in its folder
    create_run("synthetic-jsonl-theirs", "local", "424242", submit_dir=str(project), script=str(project / "t.sh"),
               sources=RunSources(since=since, workdir=str(project),
                                  specs=[SourceSpec("jsonl", str(theirs), "config key metrics_jsonl")]).to_json())

    def files_read() -> list[str]:
        settings = SidecarSettings(run_name="mine", job_id=None, state_file=tmp_path / "s.json",
                                   evidence_dir=tmp_path / "e", identity=RunSources(since=since, workdir=str(project)))
        mine = SourceSet(settings, None)
        mine.read()
        return mine.files_inspected()

    assert str(theirs) not in files_read()  # the other guarded run's recorded file
    mine = project / "runs" / "mine" / "metrics.jsonl"
    write_metrics(mine)
    assert files_read() == [str(mine)]  # this run's own, found under its folder beside it


def test_one_config_launched_twice_is_refused_on_the_added_kinds_file(
        tmp_path: Path, state: Path, jsonl_kind: kinds.SourceKind) -> None:
    """The config's logdir is made per run; its metrics_jsonl is not: the second launch would append to the first
    run's file while it runs, so the own-folder check refuses it, with the fix for that key."""
    project = make_project(tmp_path)
    config = project.root / "configs" / "synthetic-tanh-mlp.yaml"
    config.write_text(config.read_text().replace("logdir: runs/synthetic-tanh-mlp-bs64-lr5e-2\n", "")
                      + "metrics_jsonl: out/metrics.jsonl\n")
    env = {"PATH": os.environ["PATH"]}
    first = run_preflight(split_sbatch_argv(["train.sh"]), Config(), None, cwd=project.root, env=env)
    plan = first.details["source_plan"]
    assert isinstance(plan, SourcePlan)
    scheduler, job_id, script = _submit_sleeper(project.root)
    try:
        _wait_running(scheduler, job_id)
        create_run("synthetic-jsonl-first", "local", job_id, submit_dir=str(project.root), script=str(script),
                   sources=plan.for_job(job_id).to_json())
        second = run_preflight(split_sbatch_argv(["train.sh"]), Config(), None, cwd=project.root, env=env)
        own = next(r for r in second.results if r.name == "own-folder")
        metrics = project.root / "out" / "metrics.jsonl"
        assert own.status is CheckStatus.FAILED and f"{metrics} is written by run synthetic-jsonl-first" in own.finding
        assert f"give this run its own metrics_jsonl: e.g. --metrics_jsonl out/{second.run_name}.jsonl" in own.finding
        assert '--metrics_jsonl "out/${SLURM_JOB_ID}.jsonl"' in own.finding, own.finding
    finally:
        scheduler.cancel(job_id)
