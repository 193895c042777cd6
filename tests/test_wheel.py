"""A wheel built from the repository, installed non-editable into a fresh venv, renders and runs a sidecar.

The third-party dependencies come from the test venv through a .pth line (a plain path: the test venv's
editable finder for guarded_sbatch is not activated), so the only guarded_sbatch the fresh venv can
import is the installed wheel's. The run goes through the local backend from a folder outside the checkout, started
as `python -m guarded_sbatch` (the wheel installs no `guarded-sbatch` command; tests/test_light_install.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

from e2e_helpers import REPO, make_project, submitted_job_id, wait_for


CLEAN_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # nothing may point back at the checkout


def _run(argv: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=cwd, env=CLEAN_ENV)
    assert result.returncode == 0, f"{argv} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return result


def test_installed_wheel_renders_and_runs_a_sidecar(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist), str(REPO)],
         cwd=tmp_path)
    wheel = next(dist.glob("guarded_sbatch-*.whl"))
    venv = tmp_path / "fresh-venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    fresh_python = venv / "bin" / "python"
    purelib = Path(_run([str(fresh_python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    (purelib / "test-venv-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    _run([sys.executable, "-m", "pip", "--python", str(fresh_python), "install", "--no-deps", "-q", str(wheel)])

    where = _run([str(fresh_python), "-c", "import guarded_sbatch, importlib.resources as r; "
                  "print(guarded_sbatch.__file__); "
                  "print((r.files('guarded_sbatch') / 'sbatch_templates' / 'sidecar.sbatch').is_file()); "
                  "print((r.files('guarded_sbatch.site') / 'lua' / 'job_submit.lua').is_file())"],
                 cwd=tmp_path).stdout.split()
    assert Path(where[0]).is_relative_to(venv), f"imported {where[0]}, not the installed wheel"
    assert where[1:] == ["True", "True"]

    project = make_project(tmp_path)
    project.env["PYTHON"] = str(fresh_python)
    project.env["PATH"] = f"{venv / 'bin'}:{os.environ.get('PATH', '')}"
    project.env.pop("PYTHONPATH", None)
    assert not (venv / "bin" / "guarded-sbatch").exists()  # no console script: the tool's command is the site's own
    result = subprocess.run([str(fresh_python), "-P", "-m", "guarded_sbatch", "--guard-backend", "local", "--guard-tb",
                             "runs/wheel", "train.sh", "--logdir", "runs/wheel", "--steps", "3000", "--diverge-at", "40"],
                            cwd=project.root, env=project.env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    job_id = submitted_job_id(result.stdout)
    record = project.run_record(job_id)
    sidecar_script = project.state_dir / "runs" / record["run_id"]
    assert any(p.name.startswith("sidecar") and p.suffix == ".sbatch" for p in sidecar_script.iterdir()) or record["sidecar_id"]
    output = wait_for(lambda: "FINAL_SUMMARY" in (text := project.sidecar_output(job_id)) and text, 120,
                      what="the installed sidecar's FINAL_SUMMARY")
    assert "- Decision: STOP" in output
    evidence = json.loads((sidecar_script / "evidence" / "evidence.json").read_text())
    assert evidence["verdict"]["decision"] == "STOP"


def test_the_templates_have_one_copy_at_the_top_of_the_repository() -> None:
    from guarded_sbatch.launch.templates import builtin_templates_dir

    assert builtin_templates_dir().resolve() == (REPO / "sbatch_templates").resolve()
    assert {p.name for p in (REPO / "sbatch_templates").glob("*.sbatch")} >= {"sidecar.sbatch", "monitor.sbatch",
                                                                              "torchrun.sbatch", "accelerate.sbatch"}
