"""Adding a metric source kind is one module plus one registry line (docs/architecture.md, "Where a new piece goes"):

    + sources/kind_jsonl.py            (here tests/jsonl_source.py) JsonLinesSource(SourceBase) and its declaration,
                                       KIND = SourceKind("jsonl", "--jsonl", ..., finds=Finds(...), run_files=...,
                                       launch=LaunchKind("jsonl", uses=..., path_keys=("metrics_jsonl",), place="file"))
    + sources/kinds.py (one line)      "guarded_sbatch.sources.kind_jsonl",   in KIND_MODULES

The tests do exactly that, on a copy of the package (the tree is shared, so the real one is left alone): the module
is written into the copy's sources/, its line appended to the copy's registry, and nothing else differs (checked).
Every process then runs from the copy (PYTHONPATH): the pre-flight and the launch (`guarded-sbatch train.sh` on the
local backend), the sidecar job it starts, `monitor`, `show` and `kill`. So the new kind gets its pre-flight
detection, its launch resolution into the run's record, its reading by the run's own sidecar (a NaN is stopped),
`show` and its cleanup by `kill` - known to every process by its one module and one line.
"""

from __future__ import annotations

import ast
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from e2e_helpers import Project, make_project, submitted_job_id, wait_for
from package_copy import PACKAGE, changed_lines, differences, package_copy

from guarded_sbatch.sources.run_sources import RunSources, SourceSpec
from guarded_sbatch.scheduler.interface import JobState
from guarded_sbatch.scheduler.local import LocalScheduler
from guarded_sbatch.sources import kinds

TESTS = Path(__file__).resolve().parent
REGISTRY_LINE = '    "guarded_sbatch.sources.kind_jsonl",\n'

# the run: a loss logged as JSON lines to the file its config names; with --nan-at N the loss is NaN from step N
TRAIN = '''"""A tiny run logging JSON lines to the file its config's metrics_jsonl names."""
import json, math, sys, time
from pathlib import Path

config = sys.argv[sys.argv.index("--config") + 1]
path = next(line.split(":", 1)[1].strip() for line in open(config) if line.startswith("metrics_jsonl:"))
nan_at = int(sys.argv[sys.argv.index("--nan-at") + 1]) if "--nan-at" in sys.argv else None
out = Path(path)
out.parent.mkdir(parents=True, exist_ok=True)
with out.open("a") as log:
    for step in range(0, 3000, 10):
        loss = math.nan if nan_at is not None and step >= nan_at else 2.0 * math.exp(-step / 300) + 0.1
        log.write(json.dumps({"step": step, "loss": loss}) + "\\n")
        log.flush()
        time.sleep(0.05)
'''


@pytest.fixture(scope="module")
def package_with_jsonl(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of guarded_sbatch with the new kind: one module added, one line added to the registry."""
    last = '    "guarded_sbatch.sources.kind_textlog",\n'
    return package_copy(tmp_path_factory.mktemp("package"), "sources/kind_jsonl.py", (TESTS / "jsonl_source.py").read_text(),
                        "sources/kinds.py", [(last, last + REGISTRY_LINE)])


def _in_copy(project: Project, package: Path) -> Project:
    """The project's CLI (and every process it starts) run from the copy of the package."""
    env = {**project.env, "PYTHONPATH": str(package)}
    return Project(project.root, env, project.name)


def _write_metrics(path: Path, *, nan_from: int | None = None) -> None:
    rows = [{"step": s, "loss": math.nan if nan_from is not None and s >= nan_from else 2.0 * math.exp(-s / 300) + 0.1}
            for s in range(0, 400, 10)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))  # json writes NaN as NaN


def test_the_new_kind_is_one_module_and_one_registry_line(package_with_jsonl: Path) -> None:
    added, changed = differences(PACKAGE, package_with_jsonl / "guarded_sbatch")
    assert added == ["sources/kind_jsonl.py"] and changed == ["sources/kinds.py"], (added, changed)
    assert changed_lines("sources/kinds.py", package_with_jsonl) == ["+" + REGISTRY_LINE]
    # the added declaration keeps the rule of the shipped ones: at module level, core and light sources/ modules only
    tree = ast.parse((TESTS / "jsonl_source.py").read_text())
    imported = [node.module for node in tree.body if isinstance(node, ast.ImportFrom) and node.module
                and node.module.startswith("guarded_sbatch.")]
    light = ("guarded_sbatch.core.", "guarded_sbatch.sources.kind_", "guarded_sbatch.sources.base",
             "guarded_sbatch.sources.files", "guarded_sbatch.sources.points", "guarded_sbatch.sources.run_sources")
    assert imported and all(name.startswith(light) for name in imported), imported
    # the processes started from the copy import the copy (PYTHONPATH comes before the installed package)
    found = subprocess.run([sys.executable, "-P", "-c", "import guarded_sbatch.sources.kinds as k; print(k.__file__)"],
                           env={**os.environ, "PYTHONPATH": str(package_with_jsonl)}, capture_output=True, text=True,
                           check=True)
    assert found.stdout.strip() == str(package_with_jsonl / "guarded_sbatch" / "sources" / "kinds.py")
    assert "jsonl" not in kinds.KINDS  # this process's registry is the real one, untouched


def test_monitor_gets_the_new_kinds_flag_and_finds_its_files_under_a_folder(
        tmp_path: Path, package_with_jsonl: Path) -> None:
    project = _in_copy(make_project(tmp_path), package_with_jsonl)
    log = tmp_path / "exp" / "metrics.jsonl"
    _write_metrics(log)
    verdict = json.loads(project.cli("monitor", "--once", "--json", "--jsonl", str(log), check=True).stdout)
    assert verdict["decision"] == "CONTINUE" and verdict["last_step"] == 390 and verdict["data_source"] == "jsonl_ok"
    found = project.cli("monitor", "--once", "--json", str(tmp_path / "exp"), check=True)  # the kind's `Finds`
    assert json.loads(found.stdout)["last_step"] == 390
    _write_metrics(log, nan_from=300)
    result = project.cli("monitor", "--once", "--json", "--jsonl", str(log))
    verdict = json.loads(result.stdout)
    assert result.returncode == 11 and verdict["decision"] == "STOP" and verdict["reason"] == "non_finite_loss"


def test_a_launch_of_the_new_kind_is_detected_resolved_read_by_its_sidecar_shown_and_killed(
        tmp_path: Path, package_with_jsonl: Path) -> None:
    project = _in_copy(make_project(tmp_path), package_with_jsonl)
    (project.root / "train.py").write_text(TRAIN)
    config = project.root / "configs" / "synthetic-tanh-mlp.yaml"
    config.write_text(config.read_text() + "metrics_jsonl: out/metrics.jsonl\n")
    metrics = project.root / "out" / "metrics.jsonl"

    # pre-flight detection: the monitoring check names the new kind and the file the launch resolved
    checked = project.cli("check", "--json", "--guard-backend", "local", "train.sh", "--nan-at", "200")
    report = json.loads(checked.stdout)
    monitoring = next(c for c in report["checks"] if c["name"] == "monitoring")
    assert f"jsonl: config key metrics_jsonl names its file {metrics} — file={metrics}" in monitoring["evidence"], \
        monitoring

    # launch resolution: the record the launch writes holds the file, with where it came from
    launched = project.cli("--guard-backend", "local", "train.sh", "--nan-at", "200")
    assert launched.returncode == 0, launched.stderr
    job_id = submitted_job_id(launched.stdout)
    record = project.run_record(job_id)
    specs = RunSources.from_json(record["sources"]).specs
    assert SourceSpec("jsonl", str(metrics), "config key metrics_jsonl") in specs, specs

    # the run's own sidecar (a separate process, started by the local backend from the copy) reads it and stops the NaN
    scheduler = LocalScheduler(project.state_dir / "local-jobs")
    final = wait_for(lambda: (s := scheduler.state(job_id)).is_terminal and s, 120, what="training job to end")
    assert final is JobState.CANCELLED, project.sidecar_output(job_id)
    wait_for(lambda: scheduler.state(record["sidecar_id"]).is_terminal, 60, what="sidecar to exit")
    output = project.sidecar_output(job_id)
    assert "- Decision: STOP" in output and "non_finite_loss" in output and str(metrics) in output, output

    # `show` judges the recorded spec; `kill` deletes the run's own file (the kind's run_files)
    shown = project.cli("show", record["run_name"], "--json", check=True)
    view = json.loads(shown.stdout)
    assert view["source"] == str(metrics) and view["decision_now"] == "STOP" and "loss" in view["series"], view
    killed = project.cli("kill", record["run_name"], "--yes")
    assert killed.returncode == 1 and "nothing stopped" in killed.stderr, killed.stderr  # its sidecar stopped it
    assert not metrics.exists()
    assert json.loads((project.state_dir / "runs" / record["run_id"] / "run.json").read_text())["ended"] == "killed"


def test_the_registry_names_every_kind_and_refuses_an_unknown_one(tmp_path: Path) -> None:
    assert list(kinds.KINDS) == ["wandb", "neptune", "mlflow", "tensorboard", "csv", "trainer_state", "textlog"]
    assert [k.flag for k in kinds.flagged_kinds()] == ["--wandb", "--tb", "--mlflow", "--csv", "--log"]
    assert kinds.readable_kinds() == ["wandb", "mlflow", "tensorboard", "csv", "trainer_state", "textlog"]
    assert [k.name for k in kinds.launch_kinds()] == ["wandb", "neptune", "mlflow", "tensorboard", "csv"]
    with pytest.raises(kinds.SourceError, match="unknown source kind 'parquet'"):
        kinds.open_source("parquet", tmp_path)
    with pytest.raises(kinds.SourceError, match="unknown source kind 'neptune'"):  # detected at launch, never read
        kinds.open_source("neptune", tmp_path)
    with pytest.raises(kinds.SourceError, match="unknown source kind 'parquet'"):
        kinds.open_spec(SourceSpec("parquet", str(tmp_path)), lambda: RunSources().writer())


def test_the_login_path_loads_the_registry_and_no_reader(tmp_path: Path) -> None:
    """`guarded-sbatch check` (a whole pre-flight) reads every kind's declaration and imports no reader of sources/."""
    sys.path.insert(0, str(TESTS))
    from preflight_tree import build_clean_tree

    build_clean_tree(tmp_path)
    probe = f"""
import json, sys
from pathlib import Path
from guarded_sbatch.core.config import Config
from guarded_sbatch.sbatch.argv import split_sbatch_argv
from guarded_sbatch.launch.preflight import run_preflight, format_report
report = run_preflight(split_sbatch_argv(["train.sh"]), Config(), None, cwd=Path({str(tmp_path)!r}), env={{}})
format_report(report, color=False)
print(json.dumps(sorted(m for m in sys.modules if m.startswith("guarded_sbatch.sources") or m == "numpy")))
"""
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    loaded = set(json.loads(out.stdout.strip().splitlines()[-1]))
    declarations = {f"guarded_sbatch.sources.{p.stem}" for p in (PACKAGE / "sources").glob("kind_*.py")}
    assert loaded == {"guarded_sbatch.sources", "guarded_sbatch.sources.base", "guarded_sbatch.sources.kinds",
                      "guarded_sbatch.sources.points", "guarded_sbatch.sources.run_sources",
                      "guarded_sbatch.sources.place_keys", *declarations}, sorted(loaded)


NEIGHBOUR = """
import json, sys, time
from pathlib import Path
from guarded_sbatch.records.registry import create_run
from guarded_sbatch.sources.run_sources import RunSources, SourceSpec
from guarded_sbatch.sidecar.plan import WatchPlan
from guarded_sbatch.sidecar.source_set import SourceSet

project, theirs, mine, since = Path(sys.argv[1]), sys.argv[2], sys.argv[3], float(sys.argv[4])
create_run("synthetic-jsonl-theirs", "local", "424242", submit_dir=str(project), script=str(project / "t.sh"),
           sources=RunSources(since=since, workdir=str(project),
                              specs=[SourceSpec("jsonl", theirs, "config key metrics_jsonl")]).to_json())
settings = WatchPlan(run_name="mine", job_id=None, state_file=project / "s.json", evidence_dir=project / "e",
                           identity=RunSources(since=since, workdir=str(project)))
read = SourceSet(settings, None)
read.read()
print(json.dumps(read.files_inspected()))
"""


def test_a_file_of_the_new_kind_another_run_records_is_never_found_as_a_neighbours(
        tmp_path: Path, package_with_jsonl: Path) -> None:
    """A guarded run's sidecar (from the copy) looks in its folder for what its record leaves open: the other guarded
    run's recorded jsonl file is not its own, the one of its own beside it is."""
    project = _in_copy(make_project(tmp_path), package_with_jsonl)
    theirs = project.root / "runs" / "theirs" / "metrics.jsonl"
    mine = project.root / "runs" / "mine" / "metrics.jsonl"
    since = time.time() - 5
    _write_metrics(theirs, nan_from=100)  # written since this run started, the one jsonl file in its folder

    def files_read() -> list[str]:
        out = subprocess.run([sys.executable, "-P", "-c", NEIGHBOUR, str(project.root), str(theirs), str(mine),
                              str(since)], env=project.env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout.strip().splitlines()[-1])

    assert str(theirs) not in files_read()  # the other guarded run's recorded file
    _write_metrics(mine)
    assert files_read() == [str(mine)]  # this run's own, found under its folder by the kind's `Finds`


def test_one_config_launched_twice_is_refused_on_the_new_kinds_file(tmp_path: Path, package_with_jsonl: Path) -> None:
    """The config's metrics_jsonl is not made per run: a second launch would append to the first run's file while it
    runs, so the own-folder check refuses it, with the fix for that key (the kind's LaunchKind says it names a file)."""
    project = _in_copy(make_project(tmp_path), package_with_jsonl)
    (project.root / "train.py").write_text(TRAIN)
    config = project.root / "configs" / "synthetic-tanh-mlp.yaml"
    config.write_text(config.read_text().replace("logdir: runs/synthetic-tanh-mlp-bs64-lr5e-2\n", "")
                      + "metrics_jsonl: out/metrics.jsonl\n")
    metrics = project.root / "out" / "metrics.jsonl"
    launched = project.cli("--guard-backend", "local", "train.sh")
    assert launched.returncode == 0, launched.stderr
    job_id = submitted_job_id(launched.stdout)
    scheduler = LocalScheduler(project.state_dir / "local-jobs")
    try:
        report = json.loads(project.cli("check", "--json", "--guard-backend", "local", "train.sh").stdout)
        own = next(c for c in report["checks"] if c["name"] == "own-folder")
        assert own["status"] == "failed" and f"{metrics} is written by run {project.name}" in own["finding"], own
        # the file comes from the config and train.py takes no --metrics_jsonl flag: the fix is the config key
        assert "give this run its own metrics_jsonl: set metrics_jsonl: out/" in own["finding"], own
        assert "--metrics_jsonl" not in own["finding"], own
    finally:
        scheduler.cancel(job_id)
