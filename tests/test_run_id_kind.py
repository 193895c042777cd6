"""Adding a source kind known by a tracker run id is one module plus one registry line (docs/architecture.md, "Where a
new piece goes"), like a file kind (tests/test_source_registry.py):

    + sources/kind_jsonrun.py          (here tests/jsonrun_source.py) its reader and its declaration, whose
                                       LaunchKind("jsonrun", pin=_pin) says how the job is given its run id
    + sources/kinds.py (one line)      "guarded_sbatch.sources.kind_jsonrun",   in KIND_MODULES

on a copy of the package, nothing else differing (checked). Every process runs from the copy: the launch exports a
new id to the job (JSONRUN_ID) and records it as the kind's spec; the run's own sidecar job opens the run by that id
(not a neighbour's run in the same folder) and stops its NaN; `show` reads it and `kill` deletes the run's file. The
launch, the record and the sidecar know nothing of this kind but its declaration.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from e2e_helpers import Project, make_project, submitted_job_id, wait_for
from package_copy import PACKAGE, changed_lines, differences, package_copy

from guarded_sbatch.scheduler.interface import JobState
from guarded_sbatch.scheduler.local import LocalScheduler
from guarded_sbatch.sources import kinds
from guarded_sbatch.sources.run_sources import RunSources, SourceSpec, WriterIdentity

TESTS = Path(__file__).resolve().parent
REGISTRY_LINE = '    "guarded_sbatch.sources.kind_jsonrun",\n'

# the run logs to jsonruns/$JSONRUN_ID.jsonl in its folder; with --nan-at N the loss is NaN from step N
TRAIN = '''"""A tiny run logging JSON lines to jsonruns/<its JSONRUN_ID>.jsonl."""
import json, math, os, sys, time
from pathlib import Path

nan_at = int(sys.argv[sys.argv.index("--nan-at") + 1]) if "--nan-at" in sys.argv else None
out = Path("jsonruns") / (os.environ["JSONRUN_ID"] + ".jsonl")
out.parent.mkdir(exist_ok=True)
with out.open("a") as log:
    for step in range(0, 3000, 10):
        loss = math.nan if nan_at is not None and step >= nan_at else 2.0 * math.exp(-step / 300) + 0.1
        log.write(json.dumps({"step": step, "loss": loss}) + "\\n")
        log.flush()
        time.sleep(0.05)
'''


@pytest.fixture(scope="module")
def package_with_jsonrun(tmp_path_factory: pytest.TempPathFactory) -> Path:
    last = '    "guarded_sbatch.sources.kind_textlog",\n'
    return package_copy(tmp_path_factory.mktemp("package"), "sources/kind_jsonrun.py",
                        (TESTS / "jsonrun_source.py").read_text(), "sources/kinds.py", [(last, last + REGISTRY_LINE)])


def test_the_run_id_kind_is_one_module_and_one_registry_line(package_with_jsonrun: Path) -> None:
    assert differences(PACKAGE, package_with_jsonrun / "guarded_sbatch") == (["sources/kind_jsonrun.py"],
                                                                              ["sources/kinds.py"])
    assert changed_lines("sources/kinds.py", package_with_jsonrun) == ["+" + REGISTRY_LINE]
    assert "jsonrun" not in kinds.KINDS  # this process's registry is the real one, untouched


def test_a_launch_exports_the_kinds_run_id_records_it_and_its_sidecar_opens_the_run_by_it(
        tmp_path: Path, package_with_jsonrun: Path) -> None:
    base = make_project(tmp_path)
    project = Project(base.root, {**base.env, "PYTHONPATH": str(package_with_jsonrun)}, base.name)
    (project.root / "train.py").write_text(TRAIN)
    neighbour = project.root / "jsonruns" / "neighbour.jsonl"  # another job's run of the same tracker, same folder
    neighbour.parent.mkdir()
    neighbour.write_text("".join(json.dumps({"step": s, "loss": 1.0}) + "\n" for s in range(0, 9000, 10)))

    launched = project.cli("--guard-backend", "local", "train.sh", "--nan-at", "200")
    assert launched.returncode == 0, launched.stderr
    job_id = submitted_job_id(launched.stdout)
    record = project.run_record(job_id)
    recorded = RunSources.from_json(record["sources"])
    pinned = recorded.pinned("jsonrun") if recorded is not None else None
    assert pinned is not None and re.fullmatch(r"jr[0-9a-f]{8}", pinned.writer.run_id), record["sources"]
    run_id = pinned.writer.run_id
    assert pinned == SourceSpec("jsonrun", run_id, "guarded-sbatch", WriterIdentity(run_id=run_id), (str(project.root),))
    assert f"jsonrun run {run_id} (exported as JSONRUN_ID)" in launched.stdout + launched.stderr
    own = project.root / "jsonruns" / f"{run_id}.jsonl"

    # the job got the id (its log is named by it); its own sidecar read that run, not the neighbour's, and stopped it
    scheduler = LocalScheduler(project.state_dir / "local-jobs")
    final = wait_for(lambda: (s := scheduler.state(job_id)).is_terminal and s, 120, what="training job to end")
    assert final is JobState.CANCELLED, project.sidecar_output(job_id)
    wait_for(lambda: scheduler.state(record["sidecar_id"]).is_terminal, 60, what="sidecar to exit")
    output = project.sidecar_output(job_id)
    assert own.is_file() and "- Decision: STOP" in output and "non_finite_loss" in output and str(own) in output, output
    assert "jsonrun_ok" in output and "neighbour.jsonl" not in output, output

    # `show` judges the recorded spec by its id; `kill` deletes the run's own file (the kind's run_files), no other
    view = json.loads(project.cli("show", record["run_name"], "--json", check=True).stdout)
    assert view["source"] == str(own) and view["decision_now"] == "STOP", view
    killed = project.cli("kill", record["run_name"], "--yes")
    assert killed.returncode == 1 and "nothing stopped" in killed.stderr, killed.stderr  # its sidecar stopped it
    assert not own.exists() and neighbour.exists()
