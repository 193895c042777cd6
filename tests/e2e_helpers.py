"""Shared set-up for end-to-end tests: a copy of the example project, an isolated state folder,
a user config with short sidecar intervals, and the CLI run as a real subprocess."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "tiny_mlp"
EXAMPLE_NAME = "synthetic-tanh-mlp-bs64-lr5e-2"
BASELINE = "experiments/synthetic-tanh-mlp-baseline"


@dataclass
class Project:
    root: Path
    env: dict[str, str]
    name: str = EXAMPLE_NAME

    def cli(self, *args: str, timeout: float = 120, check: bool = False) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [sys.executable, "-m", "guarded_sbatch", *args], cwd=self.root, env=self.env,
            capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"guarded-sbatch {args} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
        return result

    def cli_here(self, *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
        """As `cli`, in this process (cli_runner.run_cli): for calls that only answer, start nothing that must outlive
        them and need no process of their own."""
        from cli_runner import run_cli

        return run_cli(args, env=self.env, cwd=self.root, check=check)

    @property
    def state_dir(self) -> Path:
        return Path(self.env["GUARDED_SBATCH_STATE_DIR"])

    def run_record(self, job_id: str) -> dict:
        for run_json in (self.state_dir / "runs").glob("*/run.json"):
            record = json.loads(run_json.read_text())
            if record["job_id"] == job_id:
                return record
        raise AssertionError(f"no run recorded for job {job_id}")

    def sidecar_output(self, job_id: str) -> str:
        folder = Path(self.run_record(job_id)["run_id"])
        outputs = sorted((self.state_dir / "runs" / folder).glob("sidecar-*.out"))
        return "".join(p.read_text(errors="replace") for p in outputs)


def make_project(tmp_path: Path, *, fast_interval: float = 2.0, job_poll: float = 10.0, history: bool = False,
                 evidence_plot: bool = False) -> Project:
    """The example project as a user would copy it, except that its job name gets a suffix of its own: tests run in
    parallel on one shared dev Slurm as one user, and the run-name check rightly refuses a name another test's job
    holds. `history`: its baseline (experiments/, its config and log) is a guarded run that finished healthy, the
    reference of the launches (it is then a row of `status` too); without, a new project: no reference yet.
    `evidence_plot`: a STOP draws metrics.png (about a second of CPU each, some hundred STOPs a suite), asked for by
    the tests of the plot; the others keep the data only (`sidecar.evidence_plot = false`)."""
    root = tmp_path / "project"
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns("events.out.tfevents.*", "__pycache__"))
    name = f"{EXAMPLE_NAME}-t{uuid.uuid4().hex[:6]}"
    script = root / "train.sh"
    script.write_text(script.read_text().replace(f"--job-name={EXAMPLE_NAME}\n", f"--job-name={name}\n", 1))
    config = tmp_path / "user-config.toml"
    config.write_text(
        f"[sidecar]\nfast_interval_seconds = {fast_interval}\njob_poll_seconds = {job_poll}\nmem = \"400M\"\n"
        f"evidence_plot = {str(evidence_plot).lower()}\n",
        encoding="utf-8",
    )
    env = {
        **os.environ,
        "GUARDED_SBATCH_STATE_DIR": str(tmp_path / "state"),
        "GUARDED_SBATCH_USER_CONFIG": str(config),
        "PYTHON": sys.executable,
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
    }
    env.pop("GUARDED_SBATCH_SITE_CONFIG", None)
    if history:
        from finished_runs import record_finished_run, state_folder

        baseline = root / BASELINE
        with state_folder(Path(env["GUARDED_SBATCH_STATE_DIR"])):
            record_finished_run(baseline / "config.yaml", root, log=baseline / "train.log", name=f"{name}-baseline")
    return Project(root, env, name)


def submitted_job_id(stdout: str) -> str:
    first = stdout.splitlines()[0]
    assert first.startswith("Submitted batch job "), stdout
    return first.split()[-1]


def wait_for(predicate, timeout: float, interval: float = 0.5, what: str = "condition"):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
