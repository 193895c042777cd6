"""The project notes path from the config: a STOP of a real run appends its note there (relative to the folder
the run was submitted from); without one the pre-flight says that STOPs will go unnoted; a bad value is one line."""

from __future__ import annotations

from pathlib import Path

from e2e_helpers import make_project, submitted_job_id, wait_for
from guarded_sbatch.scheduler.local import LocalScheduler

TB = "runs/synthetic-tanh-mlp-bs64-lr5e-2"


def test_notes_from_the_config_get_the_stop(tmp_path: Path) -> None:
    project = make_project(tmp_path, fast_interval=1.0)
    unset = project.cli_here("check", "--guard-backend", "local", "train.sh")
    assert "note: no project notes file: a STOP will be in the sidecar's output" in unset.stderr
    config = Path(project.env["GUARDED_SBATCH_USER_CONFIG"])
    config.write_text('notes = "NOTES.md"\n' + config.read_text())
    result = project.cli("--guard-backend", "local", "--guard-tb", TB, "train.sh", "--steps", "3000",
                         "--diverge-at", "60", "--step-seconds", "0.01")
    assert result.returncode == 0, result.stderr
    assert "no project notes file" not in result.stderr
    job_id = submitted_job_id(result.stdout)
    sidecar = project.run_record(job_id)["sidecar_id"]
    wait_for(lambda: LocalScheduler(project.state_dir / "local-jobs").state(sidecar).is_terminal, 120,
             what="the sidecar to stop the run")
    notes = (project.root / "NOTES.md").read_text()
    assert f"### {project.name}: STOP (" in notes and "evidence:" in notes
    assert f"appended to {project.root / 'NOTES.md'}" in project.sidecar_output(job_id)


def test_a_bad_notes_value_is_one_line(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    config = Path(project.env["GUARDED_SBATCH_USER_CONFIG"])
    config.write_text("notes = 3\n" + config.read_text())
    bad = project.cli_here("check", "train.sh")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and 'notes = \\"NOTES.md\\"' not in bad.stderr
    assert 'e.g. notes = "NOTES.md"' in bad.stderr
