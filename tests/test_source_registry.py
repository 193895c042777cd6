"""Adding a metric source is one module plus one registry line (docs/architecture.md, "Where a new piece goes"):

    + sources/jsonl.py                 (here tests/jsonl_source.py) JsonLinesSource(SourceBase), is_metrics_file, own_files,
                                       KIND = SourceKind("jsonl", "--jsonl", ..., matches=..., run_files=...)
    + sources/kinds.py (one line)   register(jsonl.KIND)

and through the real CLI the new kind gets its `monitor` flag, is found under a folder, is read by a guarded
run's sidecar from the run's record (the launch writes it into RunSources.specs), is shown by `show` and is
deleted by `kill` - with no other file touched.
"""

from __future__ import annotations

import io
import json
import math
import time
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import jsonl_source
import pytest

from guarded_sbatch.cli.main import main
from guarded_sbatch.core.registry import create_run, find_run
from guarded_sbatch.core.run_sources import RunSources, SourceSpec
from guarded_sbatch.scheduler.interface import JobState, SubmitRequest
from guarded_sbatch.scheduler.local import LocalScheduler
from guarded_sbatch.sources import kinds


@pytest.fixture()
def jsonl_kind() -> Iterator[kinds.SourceKind]:
    kind = kinds.register(jsonl_source.KIND)  # the one registry line
    yield kind
    kinds.KINDS.pop("jsonl")


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
