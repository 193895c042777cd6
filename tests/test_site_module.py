"""`module load guarded-sbatch` under real Lmod, then `sbatch` on the real dev Slurm: training jobs get the
pre-flight (blocked → exit 3, passed → training + sidecar, both marked), other jobs reach Slurm's sbatch
untouched. The Tcl modulefile loads under Lmod too."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from e2e_helpers import make_project
from guarded_sbatch.launch.marking import script_digest
from test_site_helpers import REPO, admin_modulefile, cancel, scontrol_text, site_config, unique_name, with_module

pytestmark = pytest.mark.slurm
TB = "runs/synthetic-tanh-mlp-bs64-lr5e-2"


def test_repository_modulefiles_load_under_lmod(tmp_path: Path) -> None:
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path)}
    show = 'command -v sbatch; command -v guarded-sbatch; echo "$GUARDED_SBATCH_REAL_SBATCH|$GUARDED_SBATCH_PYTHON"'
    for module in ("guarded-sbatch", "tcl/guarded-sbatch"):
        out = with_module(REPO / "modulefiles", show, module=module, cwd=tmp_path, env=env)
        assert out.returncode == 0, out.stderr
        assert out.stdout.splitlines() == [
            str(REPO / "shims" / "sbatch"),
            str(REPO / "shims" / "guarded-sbatch"),
            f"/usr/bin/sbatch|{REPO / '.venv' / 'bin' / 'python'}",
        ], module
    unloaded = with_module(REPO / "modulefiles", "module unload guarded-sbatch; command -v sbatch", cwd=tmp_path, env=env)
    assert unloaded.stdout.strip() == "/usr/bin/sbatch"


def test_sbatch_through_the_module(slurm_cluster: None, tmp_path: Path) -> None:
    project = make_project(tmp_path)
    modulepath = admin_modulefile(tmp_path, site_config(tmp_path, policy="tag"))
    env = {**project.env, "GUARDED_SBATCH_PYTHON": sys.executable}
    (project.root / "plain.sh").write_text("#!/bin/bash\n#SBATCH --job-name=plain-hostname-check\nhostname\n")
    blocked = project.root / "blocked.sh"
    blocked.write_text("#!/bin/bash\n#SBATCH --job-name=run-1\npython train.py --config configs/missing.yaml\n")
    jobs: list[str] = []
    try:
        wrap = with_module(modulepath, "sbatch --hold --wrap hostname", cwd=project.root, env=env)
        assert wrap.returncode == 0, wrap.stderr
        assert re.fullmatch(r"Submitted batch job \d+\n", wrap.stdout), wrap.stdout
        jobs.append(wrap.stdout.split()[-1])
        assert "Pre-flight" not in wrap.stderr and "guarded-sbatch" not in scontrol_text(jobs[-1])

        plain = with_module(modulepath, "sbatch --parsable --hold plain.sh", cwd=project.root, env=env)
        assert plain.returncode == 0 and re.fullmatch(r"\d+\n", plain.stdout), (plain.stdout, plain.stderr)
        jobs.append(plain.stdout.strip())

        stopped = with_module(modulepath, "sbatch blocked.sh", cwd=project.root, env=env)
        assert stopped.returncode == 3 and stopped.stdout == ""
        assert "## Pre-flight" in stopped.stderr and "[FAIL] run-name" in stopped.stderr
        assert "launch blocked by the pre-flight" in stopped.stderr

        guarded = with_module(
            modulepath,
            f"sbatch --begin=now+3600 --job-name={unique_name()} --guard-tb {TB} train.sh --steps 50",
            cwd=project.root,
            env=env,
        )
        assert guarded.returncode == 0, guarded.stderr
        assert re.fullmatch(r"Submitted batch job \d+\n", guarded.stdout), guarded.stdout
        assert "## Pre-flight" in guarded.stderr
        job_id = guarded.stdout.split()[-1]
        record = project.run_record(job_id)
        jobs += [job_id, record["sidecar_id"]]
        digest = script_digest((project.root / "train.sh").read_bytes())
        assert f"Comment=guarded-sbatch:preflight={digest}" in scontrol_text(job_id)
        sidecar_script = project.state_dir / "runs" / record["run_id"] / "sidecar.sbatch"
        sidecar_digest = script_digest(sidecar_script.read_bytes())
        assert f"Comment=guarded-sbatch:sidecar={sidecar_digest}" in scontrol_text(record["sidecar_id"])
    finally:
        cancel(*jobs)
