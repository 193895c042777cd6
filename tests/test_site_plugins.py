"""Slurm's own lua plugins on the real dev Slurm (CliFilterPlugins=cli_filter/lua, JobSubmitPlugins=lua):
a guarded job is accepted under either policy; an unguarded training job submitted around the shim is tagged
(policy "tag") or rejected with how to submit it (policy "reject") — by cli_filter for a script file, by
job_submit for a script on stdin or a forged marker. Non-training jobs pass.

The plugins change the cluster other tests share: they are on only inside one module-scoped fixture, and its
finalizer always restores the cluster without them (`DEV_SLURM_EXTRA_CONF= scripts/dev-slurm up`)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e_helpers import make_project, submitted_job_id
from guarded_sbatch.site.enforcement import policy_from_table, render_lua_policy
from test_site_helpers import PLUGINS, REPO, cancel, require, scontrol_text, unique_name

pytestmark = [pytest.mark.slurm, pytest.mark.serial]
REAL_SBATCH = "/usr/bin/sbatch"
HOW_TO = "module load guarded-sbatch; guarded-sbatch [options] script.sh"
TB = "runs/synthetic-tanh-mlp-bs64-lr5e-2"


class Plugins:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.jobs: list[str] = []

    def dev_slurm_up(self, policy: str) -> None:
        lua_dir = self.folder / "lua"
        lua_dir.mkdir(exist_ok=True)
        for name in ("cli_filter.lua", "job_submit.lua", "guarded_sbatch_lib.lua"):
            shutil.copy(PLUGINS / name, lua_dir / name)
        rendered = render_lua_policy(policy_from_table({"unguarded_training": policy}, "test_site_plugins"))
        (lua_dir / "guarded_sbatch_policy.lua").write_text(rendered)
        extra = self.folder / "extra.conf"
        extra.write_text("CliFilterPlugins=cli_filter/lua\nJobSubmitPlugins=lua\n")
        _dev_slurm_up({"DEV_SLURM_EXTRA_CONF": str(extra), "DEV_SLURM_LUA_DIR": str(lua_dir)})

    def sbatch(self, *args: str, stdin: str | None = None, cwd: Path) -> subprocess.CompletedProcess[str]:
        out = subprocess.run(
            [REAL_SBATCH, "--hold", *args],
            cwd=cwd,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            env={k: v for k, v in os.environ.items() if not k.startswith("GUARDED_")},
        )
        if out.returncode == 0:
            self.jobs.append(out.stdout.split()[-1])
        return out


def _dev_slurm_up(extra_env: dict[str, str]) -> None:
    out = subprocess.run(
        [str(REPO / "scripts" / "dev-slurm"), "up"], env={**os.environ, **extra_env}, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, f"dev-slurm up failed: {out.stderr}"


@pytest.fixture(scope="module")
def plugins(slurm_cluster: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plugins]:
    require(os.geteuid() == 0, "switching the dev Slurm's plugins needs root (scripts/dev-slurm up)")
    state = Plugins(tmp_path_factory.mktemp("site-plugins"))
    try:
        yield state
    finally:
        cancel(*state.jobs)
        _dev_slurm_up({"DEV_SLURM_EXTRA_CONF": ""})  # always: other tests share this cluster


def _training_script(folder: Path) -> Path:
    script = folder / "train-unguarded.sh"
    script.write_text("#!/bin/bash\n#SBATCH --job-name=coco-resnet50-unguarded\nsrun python train.py --lr 3e-4\n")
    return script


def test_tag_then_reject(plugins: Plugins, tmp_path: Path) -> None:
    project = make_project(tmp_path)
    train = _training_script(project.root)
    plugins.dev_slurm_up("tag")

    tagged = plugins.sbatch(str(train), cwd=project.root)
    assert tagged.returncode == 0, tagged.stderr
    assert re.fullmatch(r"Submitted batch job \d+\n", tagged.stdout)  # stdout stays sbatch's own
    assert "will be tagged guarded-sbatch:unguarded" in tagged.stderr  # cli_filter's note
    assert "AdminComment=guarded-sbatch:unguarded (line 3: srun python train.py --lr 3e-4)" in scontrol_text(plugins.jobs[-1])
    from_stdin = plugins.sbatch(stdin=train.read_text(), cwd=project.root)
    assert from_stdin.returncode == 0 and "AdminComment=guarded-sbatch:unguarded" in scontrol_text(plugins.jobs[-1])
    guarded = project.cli(
        "--guard-backend",
        "slurm",
        "--begin=now+3600",
        f"--job-name={unique_name()}",
        "--guard-tb",
        TB,
        "train.sh",
        "--steps",
        "50",
    )
    assert guarded.returncode == 0, guarded.stderr
    job_id = submitted_job_id(guarded.stdout)
    plugins.jobs += [job_id, project.run_record(job_id)["sidecar_id"]]
    for guarded_job in plugins.jobs[-2:]:
        assert "AdminComment=" not in scontrol_text(guarded_job)

    plugins.dev_slurm_up("reject")
    by_cli_filter = plugins.sbatch(str(train), cwd=project.root)
    assert by_cli_filter.returncode != 0 and by_cli_filter.stdout == ""
    assert "did not go through the launch pre-flight" in by_cli_filter.stderr and HOW_TO in by_cli_filter.stderr
    by_job_submit = plugins.sbatch(stdin=train.read_text(), cwd=project.root)
    assert by_job_submit.returncode != 0 and by_job_submit.stdout == ""
    assert "did not go through the launch pre-flight" in by_job_submit.stderr and HOW_TO in by_job_submit.stderr
    forged = plugins.sbatch("--comment=guarded-sbatch:preflight=0badc0de", stdin=train.read_text(), cwd=project.root)
    assert forged.returncode != 0 and HOW_TO in forged.stderr
    not_training = plugins.sbatch("--wrap", "hostname", cwd=project.root)
    assert not_training.returncode == 0, not_training.stderr
    guarded = project.cli(
        "--guard-backend",
        "slurm",
        "--begin=now+3600",
        f"--job-name={unique_name()}",
        "--guard-tb",
        "runs/second-launch",  # the first guarded run (still pending) writes TB: the own-folder check refuses it
        "train.sh",
        "--steps",
        "50",
        "--logdir",
        "runs/second-launch",
    )
    assert guarded.returncode == 0, guarded.stderr
    job_id = submitted_job_id(guarded.stdout)
    plugins.jobs += [job_id, project.run_record(job_id)["sidecar_id"]]
    assert "queue wait unknown" not in guarded.stderr  # the pre-flight's own --test-only carries the marker too
