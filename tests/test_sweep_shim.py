"""The `sbatch` shim and submitit's generated `*_submission.sh` (what Hydra's plain submitit launcher submits): handed
to the real sbatch untouched by default (`submitit.core._submit` is in enforcement.exempt_programs: the guarded route
is GuardedExecutor or hydra/launcher=guarded_submitit_slurm, whose jobs carry the marker); guarded like any training
script when the site asks for it by taking submitit out of exempt_programs."""

from __future__ import annotations

import os
from pathlib import Path

from guarded_sbatch.site.shim_decision import decide

SUBMISSION = """#!/bin/bash

# Parameters
#SBATCH --array=0-2%256
#SBATCH --cpus-per-task=1
#SBATCH --error={folder}/%A_%a_0_log.err
#SBATCH --job-name=train
#SBATCH --open-mode=append
#SBATCH --output={folder}/%A_%a_0_log.out
#SBATCH --signal=USR2@120
#SBATCH --time=10

# command
export SUBMITIT_EXECUTOR=slurm
srun --unbuffered --output {folder}/%A_%a_%t_log.out --error {folder}/%A_%a_%t_log.err python -u -m submitit.core._submit {folder}
"""


def _submission(tmp_path: Path) -> Path:
    folder = tmp_path / "multirun" / ".submitit" / "%j"
    script = tmp_path / "multirun" / ".submitit" / "4242_submission.sh"
    script.parent.mkdir(parents=True)
    script.write_text(SUBMISSION.format(folder=folder))
    return script


def test_submitits_scripts_pass_untouched_by_default(tmp_path: Path) -> None:
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path)}
    assert decide([str(_submission(tmp_path))], env) == (False, "no training launcher line")


def test_a_site_that_asks_for_it_gets_submitits_scripts_guarded(tmp_path: Path) -> None:
    site = tmp_path / "site.toml"
    site.write_text('[enforcement]\nexempt_programs = ["guarded_sbatch", "pip"]\n')
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "GUARDED_SBATCH_SITE_CONFIG": str(site)}
    guard, why = decide([str(_submission(tmp_path))], env)
    assert guard and why.startswith("training job (line ") and "python -u -m submitit.core._submit" in why, why
