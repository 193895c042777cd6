"""The admin guide's recipes, run as written on the dev Slurm: guarded jobs in the queue (marker in the
comment), tagged unguarded jobs in sacct (AdminComment), slurmctld's log, and the audit log's waivers and
per-user history for a real guarded launch."""

from __future__ import annotations

import getpass
import re
import subprocess
import uuid
from pathlib import Path

import pytest

from e2e_helpers import REPO, make_project, submitted_job_id, wait_for

pytestmark = pytest.mark.slurm
TB = "runs/synthetic-tanh-mlp-bs64-lr5e-2"


def recipes() -> dict[str, str]:
    text = (REPO / "docs" / "admin-guide.md").read_text(encoding="utf-8")
    section = text[text.index("### Admin recipes"):]
    block = section[section.index("```bash") + len("```bash"):]
    block = block[:block.index("```")]
    found: dict[str, str] = {}
    name = None
    for line in block.strip().splitlines():
        match = re.match(r"# recipe: (\S+)", line)
        if match:
            name = match.group(1)
        elif name and line.strip():
            found[name] = (found.get(name, "") + "\n" + line).strip()
    return found


def run_recipe(name: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", recipes()[name]], env=env, capture_output=True, text=True, timeout=60)


def test_the_readme_names_every_recipe() -> None:
    assert set(recipes()) == {"tagged", "guarded-queue", "guarded-history", "ctld-log", "audit-waivers", "audit-user"}


def test_admin_recipes_on_the_dev_slurm(slurm_cluster: None, tmp_path: Path) -> None:
    project = make_project(tmp_path)
    audit = tmp_path / "audit.jsonl"
    site = tmp_path / "site.toml"
    site.write_text(f'[audit]\nlog = "{audit}"\n')
    env = {**project.env, "GUARDED_SBATCH_SITE_CONFIG": str(site), "AUDIT_LOG": str(audit),
           "AUDIT_USER": getpass.getuser()}
    project.env.update(env)
    tag = uuid.uuid4().hex[:8]
    jobs: list[str] = []
    try:
        launched = project.cli("--guard-backend", "slurm", "--begin=now+3600", "--job-name", f"tmp{tag}",
                               "--guard-waive", "run-name=admin recipe test", "--guard-tb", TB, "train.sh",
                               "--steps", "50")
        assert launched.returncode == 0, launched.stderr
        job_id = submitted_job_id(launched.stdout)
        jobs += [job_id, project.run_record(job_id)["sidecar_id"]]

        queue = run_recipe("guarded-queue", env)
        assert queue.returncode == 0, queue.stderr
        line = next(line for line in queue.stdout.splitlines() if line.split()[0] == job_id)
        assert f"tmp{tag}" in line and "guarded-sbatch:preflight=" in line

        plain = subprocess.run(["sbatch", "--parsable", f"--job-name=plain-{tag}", "--output=/dev/null",
                                "--wrap", "sleep 60"], capture_output=True, text=True, timeout=30, check=True)
        plain_id = plain.stdout.strip().split(";")[0]
        jobs.append(plain_id)
        wait_for(lambda: subprocess.run(["squeue", "-h", "-j", plain_id, "-o", "%T"], capture_output=True,
                                        text=True, timeout=30).stdout.strip() == "RUNNING", 60, 1, "the plain job")
        # what job_submit.lua does with unguarded_training = "tag" (its own test switches the plugins on;
        # this one leaves the shared cluster's configuration alone and tags as root the same way)
        subprocess.run(["scontrol", "update", f"JobId={plain_id}", "AdminComment=guarded-sbatch:unguarded"],
                       check=True, timeout=30, capture_output=True)
        subprocess.run(["scancel", plain_id], check=True, timeout=30)

        def tagged() -> str | None:
            out = run_recipe("tagged", env)
            rows = [row for row in out.stdout.splitlines() if row.split("|")[0] == plain_id]
            return rows[0] if rows else None

        row = wait_for(tagged, 60, 2, "sacct to list the tagged job")
        assert f"plain-{tag}" in row and row.endswith("guarded-sbatch:unguarded")

        history = run_recipe("guarded-history", env)  # grep finds nothing without AccountingStoreFlags=job_comment
        assert history.returncode in (0, 1) and not history.stderr.strip(), history.stderr
        store_flags = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=30).stdout
        if "job_comment" in store_flags:
            wait_for(lambda: job_id in run_recipe("guarded-history", env).stdout, 60, 2, "sacct comment")

        log = run_recipe("ctld-log", env)
        assert log.returncode == 0 and "No such file" not in log.stderr, log.stderr

        waivers = run_recipe("audit-waivers", env)
        assert waivers.returncode == 0, waivers.stderr
        assert f'"job":"{job_id}"' in waivers.stdout and '"check":"run-name"' in waivers.stdout
        assert '"reason":"admin recipe test"' in waivers.stdout
        mine = run_recipe("audit-user", env)
        assert '"event":"launch"' in mine.stdout and f'"job":"{job_id}"' in mine.stdout
    finally:
        if jobs:
            subprocess.run(["scancel", *jobs], capture_output=True, timeout=30)
