"""`show`, `status` and `kill` in a project with several runs use each run's recorded sources, as its sidecar
did: never a rediscovery of the project folder (which found two runs' folders and said "no metrics found yet"),
and in one folder two writers share, only the run's own event file, told by what its sidecar saw of its job."""

from __future__ import annotations

import io
import json
import math
import os
import shutil
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from source_writers import tb_event, write_tb_events
from guarded_sbatch.cli.main import main
from guarded_sbatch.records.registry import create_run
from guarded_sbatch.sources.run_sources import RunSources, WriterIdentity
from guarded_sbatch.sources.writers import this_host
from package_extras import tb_specs


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


def events(nan_from: int | None) -> list:  # type: ignore[type-arg]
    now = time.time()
    return [tb_event(s, "train/loss", math.nan if nan_from is not None and s >= nan_from else 2.0 * math.exp(-s / 40) + 0.1,
                     wall_time=now + s) for s in range(60)]


def as_written_by(event_file: Path, pid: int) -> Path:
    """The event file renamed as the writer process `pid` on this host names it (events.out.tfevents.<t>.<host>.<pid>.<n>)."""
    created = event_file.name.split(".")[3]
    target = event_file.with_name(f"events.out.tfevents.{created}.{this_host()}.{pid}.0")
    event_file.rename(target)
    return target


def record(name: str, job_id: str, project: Path, sources: RunSources) -> None:
    create_run(name, "local", job_id, submit_dir=str(project), script=str(project / "train.sh"), sources=sources.to_json())


def test_show_of_two_runs_in_one_project_reads_each_runs_recorded_folder(tmp_path: Path, state: Path) -> None:
    project = tmp_path / "project"
    since = time.time() - 5
    write_tb_events(project / "runs" / "a", events(None))
    write_tb_events(project / "runs" / "b", events(30))
    for name, job_id, folder in (("synthetic-tb-run-a", "90001", "a"), ("synthetic-tb-run-b", "90002", "b")):
        record(name, job_id, project, RunSources(since=since, workdir=str(project),
                                                 specs=tb_specs(project / "runs" / folder, origin="--logdir")))
    for name, folder, decision in (("synthetic-tb-run-a", "a", "CONTINUE"), ("synthetic-tb-run-b", "b", "STOP")):
        code, out, _ = cli("show", name, "--json")
        view = json.loads(out)
        assert code == 0 and view["source"] == str(project / "runs" / folder) and view["decision_now"] == decision, view
        assert view["series"], view
    code, out, _ = cli("status", "--json", "--all")
    names = {row["run"] for row in json.loads(out)["runs"]}
    assert code == 0 and {"synthetic-tb-run-a", "synthetic-tb-run-b"} <= names, out


def test_show_in_a_folder_two_writers_share_reads_only_the_runs_own_file(tmp_path: Path, state: Path) -> None:
    project = tmp_path / "project"
    shared = project / "runs" / "shared"
    since = time.time() - 5
    healthy = as_written_by(write_tb_events(shared, events(None)), 41001)
    broken = as_written_by(write_tb_events(shared, events(30)), 41002)
    for name, job_id, pid, other in (("synthetic-shared-healthy", "90011", 41001, 41002),
                                     ("synthetic-shared-nan", "90012", 41002, 41001)):
        seen = WriterIdentity(hosts=(this_host(),), pids=(pid,), pid_hosts=(this_host(),), others=(other,))
        record(name, job_id, project, RunSources(since=since, workdir=str(project), specs=tb_specs(shared),
                                                 uid=os.geteuid(), seen=seen))
    code, out, _ = cli("show", "synthetic-shared-healthy", "--json")
    view = json.loads(out)
    assert view["decision_now"] == "CONTINUE" and not view["anomalies"], view
    code, out, _ = cli("show", "synthetic-shared-nan", "--json")
    view = json.loads(out)
    assert view["decision_now"] == "STOP", view

    # a record from before the writers were seen: both files are named, the verdict WAITs, never STOPs
    record("synthetic-shared-unseen", "90013", project, RunSources(since=since, workdir=str(project),
                                                                    specs=tb_specs(shared)))
    code, out, _ = cli("show", "synthetic-shared-unseen", "--json")
    view = json.loads(out)
    assert view["decision_now"] == "WAIT", view
    assert healthy.name in view["reason_now"] and broken.name in view["reason_now"], view
    shutil.rmtree(shared)
