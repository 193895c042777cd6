"""A launch with no config file is diffed by its launcher line (launch/launcher_config.py, config-diff): script
arguments, torchrun/accelerate options and env-set hyper-parameters against the line of its program's reference
run; the first run of a program is the "new project" warning, never a block; the fix is worded for each front end."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest
from guarded_sbatch.core.config import Config
from guarded_sbatch.records.registry import create_run
from guarded_sbatch.sbatch.argv import split_sbatch_argv
from guarded_sbatch.launch.preflight import PreflightReport, run_preflight
from guarded_sbatch.launch.results import API_WORDS, CheckResult, CheckStatus
from guarded_sbatch.launch.run_reference import make_reference, save_config_snapshot
from guarded_sbatch.sidecar.state import SidecarState

HEADER = "#!/bin/bash\n#SBATCH --nodes={nodes}\n#SBATCH --time=00:10:00\n#SBATCH --output=out-%j.log\n"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GUARDED_SBATCH_STATE_DIR", str(tmp_path / "state"))
    root = tmp_path / "project"
    root.mkdir()
    (root / "train.py").write_text("import time\ntime.sleep(1)\n")
    return root


def _script(root: Path, line: str, nodes: int = 1, name: str = "train.sh") -> str:
    (root / name).write_text(HEADER.format(nodes=nodes) + textwrap.dedent(line))
    return name


def _check(root: Path, *words: str) -> PreflightReport:
    return run_preflight(split_sbatch_argv(["--job-name=synthetic-mlp-bs64-lr3e-4", *words]), Config(), None,
                         cwd=root, env={"PATH": os.environ["PATH"]})


def _diff(report: PreflightReport) -> CheckResult:
    return next(r for r in report.results if r.name == "config-diff")


def _launched(report: PreflightReport, job_id: str, *, healthy: bool = True) -> None:
    """What a launch leaves of the run for the next one (launch/pipeline.py does the same after submitting), and
    what its sidecar leaves when it finished healthy (COMPLETED, last check CONTINUE; else stopped by it)."""
    record = create_run("synthetic-mlp-bs64-lr3e-4", "local", job_id)
    save_config_snapshot(record, report.details["intended_run_config"])  # type: ignore[arg-type]
    decision, state = ("CONTINUE", "COMPLETED") if healthy else ("STOP", "CANCELLED")
    SidecarState(finished=True, last_decision=decision, last_job_state=state).save(record.sidecar_state_file)


def test_a_launch_not_known_to_have_finished_healthy_is_no_reference(project: Path) -> None:
    script = _script(project, 'torchrun --nproc_per_node 2 train.py "$@"\n')
    _launched(_check(project, script, "--lr", "3e-2", "--batch_size", "64"), "91", healthy=False)
    diff = _diff(_check(project, script, "--lr", "3e-4", "--batch_size", "256"))
    assert diff.status is CheckStatus.WARNED and diff.finding.startswith("new project"), diff.finding


def test_the_first_run_of_a_script_is_a_new_project_then_a_batch_change_without_lr_is_blocked(project: Path) -> None:
    script = _script(project, 'torchrun --nproc_per_node 2 train.py "$@"\n')
    first = _check(project, script, "--lr", "3e-4", "--batch_size", "64", "--steps", "500")
    diff = _diff(first)
    assert diff.status is CheckStatus.WARNED and diff.finding.startswith("new project: no guarded run of ")
    assert "config-diff" not in first.blocking_checks and "cannot diff" not in diff.finding
    _launched(first, "101")

    same = _diff(_check(project, script, "--lr", "3e-4", "--batch_size", "64", "--steps", "800"))
    assert same.status is CheckStatus.PASSED, same.finding
    assert "1 setting(s) differ from the reference run's launcher line" in same.finding
    assert "~ steps: '500' -> '800'" in same.evidence

    bigger = _diff(_check(project, script, "--lr", "3e-4", "--batch_size", "256", "--steps", "500"))
    assert bigger.status is CheckStatus.FAILED
    assert "global batch 128 -> 512 (×4) but the learning rate was not rescaled (0.0003 -> 0.0003" in bigger.finding

    rescaled = _diff(_check(project, script, "--lr", "1.2e-3", "--batch_size", "256", "--steps", "500"))
    assert rescaled.status is CheckStatus.WARNED and "rescaled by the linear rule" in rescaled.finding


def test_more_processes_or_nodes_on_the_launcher_line_change_the_global_batch(project: Path) -> None:
    _launched(_check(project, _script(project, 'torchrun --nproc_per_node 2 train.py --lr 3e-4 --batch_size 64\n')),
              "201")
    wider = _diff(_check(project, _script(project, 'torchrun --nproc_per_node 8 train.py --lr 3e-4 --batch_size 64\n')))
    assert wider.status is CheckStatus.FAILED and "global batch 128 -> 512" in wider.finding
    assert "~ torchrun --nproc_per_node: '2' -> '8'" in wider.evidence
    two_nodes = _diff(_check(project, _script(project, 'torchrun --nnodes 2 --nproc_per_node 2 train.py --lr 3e-4 '
                                                       '--batch_size 64\n', nodes=2)))
    assert two_nodes.status is CheckStatus.FAILED and "global batch 128 -> 256" in two_nodes.finding


def test_env_set_hyper_parameters_and_accelerate_options_are_diffed(project: Path) -> None:
    base = 'export LR=3e-4\nexport BATCH_SIZE=32\naccelerate launch --num_processes 4 --mixed_precision bf16 train.py\n'
    _launched(_check(project, _script(project, base)), "301")
    fp16 = _diff(_check(project, _script(project, base.replace("bf16", "fp16"))))
    assert fp16.status is CheckStatus.FAILED and "precision bf16 -> fp16" in fp16.finding
    batch = _diff(_check(project, _script(project, base.replace("BATCH_SIZE=32", "BATCH_SIZE=128"))))
    assert batch.status is CheckStatus.FAILED and "global batch 128 -> 512 (×4)" in batch.finding
    assert "~ env.BATCH_SIZE: '32' -> '128'" in batch.evidence


def test_a_named_reference_run_wins_and_another_program_is_another_project(project: Path) -> None:
    script = _script(project, "python train.py --lr 0.1 --batch_size 64\n")
    _launched(_check(project, script), "401")
    (project / "other.py").write_text("print('x')\n")
    other = _diff(_check(project, _script(project, "python other.py --lr 0.1 --batch_size 64\n", name="o.sh")))
    assert other.status is CheckStatus.WARNED and "new project" in other.finding and "other.py" in other.finding
    with pytest.raises(Exception, match="cannot be a reference"):  # it never ran: not finished healthy
        make_reference(create_run("synthetic-mlp-bs64-lr3e-4", "local", "402"))


def test_nothing_to_diff_is_a_warning_and_its_fix_speaks_each_front_end(project: Path) -> None:
    script = _script(project, "python -u -m submitit.core._submit /tmp/folder\n")
    diff = _diff(_check(project, script))
    assert diff.status is CheckStatus.WARNED and diff.finding.startswith("new project")
    _launched(_check(project, script), "501")
    again = _diff(_check(project, script))
    assert again.status is CheckStatus.WARNED and "nothing to diff" in again.finding
    assert "--guard-config FILE" in again.finding
    api = again.finding_for(API_WORDS)
    assert 'config="FILE"' in api and "--guard-" not in api


def test_a_named_config_that_is_missing_still_blocks(project: Path) -> None:
    script = _script(project, "python train.py --config configs/missing.yaml\n")
    report = _check(project, script)
    diff = _diff(report)
    # the paths check blocks on it and names the fix; the diff says it could not look, without its own flags
    assert report.blocked and "paths" in report.blocking_checks
    assert diff.status is CheckStatus.WARNED and "does not exist (see paths)" in diff.finding


def test_a_config_files_last_healthy_run_is_its_reference_read_from_the_projects_list(project: Path) -> None:
    """A config with no reference named is diffed against its last run that finished healthy: found in the
    project's own list of its last runs (never the whole registry)."""
    (project / "exp.yaml").write_text("lr: 0.1\nbatch_size: 64\n")
    script = _script(project, "python train.py --config exp.yaml\n")
    first = _check(project, script)
    record = create_run("synthetic-mlp-bs64-lr3e-4", "local", "602", config_path=str(project / "exp.yaml"),
                        submit_dir=str(project), script=str(script))
    save_config_snapshot(record, first.details["intended_run_config"])  # type: ignore[arg-type]
    record.sidecar_state_file.write_text('{"finished": true, "last_decision": "CONTINUE", '
                                         '"last_job_state": "COMPLETED", "last_step": 100}')
    (project / "exp.yaml").write_text("lr: 0.1\nbatch_size: 256\n")
    bigger = _diff(_check(project, script))
    assert bigger.status is CheckStatus.FAILED and "global batch 64 -> 256" in bigger.finding, bigger.finding
    assert any(record.run_id in line for line in (bigger.finding, *bigger.evidence)), bigger.evidence
    lists = list((project.parent / "state" / "references").glob("project-*.json"))
    assert lists and any(record.run_id in path.read_text() for path in lists), lists


def test_the_reference_of_a_programs_launches_reads_one_record_whatever_its_history(
        project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A loop's 30th launch reads what its 2nd does: the family's last runs are judged from their sidecar states,
    newest first, and the record of the one run chosen (the newest that finished healthy) is the only one read."""
    from guarded_sbatch.launch import run_reference

    script = _script(project, 'python train.py --lr 0.1 --batch_size 64 "$@"\n')
    read: list[Path] = []
    original = run_reference.read_json
    monkeypatch.setattr(run_reference, "read_json", lambda path, **kw: (read.append(Path(path)), original(path, **kw))[1])
    records_read = []
    for index in range(30):
        read.clear()
        report = _check(project, script, "--steps", str(100 + index))
        records_read.append(sum(path.name == "run.json" for path in read))
        _launched(report, str(700 + index))
    assert records_read[0] == 0 and set(records_read[1:]) == {1}, records_read
    assert sum(path.name == "sidecar-state.json" for path in read) == 1
