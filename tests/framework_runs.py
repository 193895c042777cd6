"""Shared set-up of the real-trainer end-to-end tests (tests/test_e2e_frameworks*.py): a fresh copy of one of the
example projects under examples/ per run, launched the everyday way (`guarded-sbatch train.sh ARGS`, no guard
flag), and what each run must show once it has ended."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from conftest import require
from e2e_helpers import REPO, Project, make_project, submitted_job_id, wait_for
from guarded_sbatch.scheduler.interface import JobState, Scheduler

STOP_REASONS = {"non_finite_loss", "non_finite_metric", "hidden_nan", "divergence", "loss_spike", "grad_explosion",
                "eval_failing"}


@dataclass(frozen=True)
class Example:
    folder: str  # under examples/
    script: str
    healthy: tuple[str, ...]  # the script's arguments for each kind of run
    nan: tuple[str, ...]
    diverge: tuple[str, ...]
    names: tuple[str, ...]  # metric names as the trainer writes them: each must appear in the reports
    judged: tuple[str, ...]  # the report's data source while the run's own files are read
    reads: str  # a regex the judged file (the report's "- Run: NAME (job N) — FILE") must match: never the job's log

    def job_name(self) -> str:
        text = (REPO / "examples" / self.folder / self.script).read_text(encoding="utf-8")
        found = re.search(r"^#SBATCH --job-name=(\S+)$", text, re.MULTILINE)
        assert found, f"{self.script} names no job"
        return found.group(1)


HF = Example("hf_trainer", "train.sh", healthy=("--max-steps", "80", "--step-seconds", "0.05"),
             nan=("--nan-at", "40", "--step-seconds", "0.1"), diverge=("--diverge-at", "60", "--step-seconds", "0.1"),
             names=("train/loss", "train/grad_norm", "eval/loss"), judged=("tensorboard_ok", "wandb_ok"),
             reads=r"/outputs/synthetic-counting-gpt2-tiny-lr1e-3$|^synthetic-counting-gpt2/\w{8}$")
LIGHTNING_CSV = Example("lightning_tiny", "train.sh", healthy=("--max-steps", "300", "--step-seconds", "0.02"),
                        nan=("--nan-at", "60", "--step-seconds", "0.05"),
                        diverge=("--diverge-at", "60", "--step-seconds", "0.05"),
                        names=("train_loss", "val_loss"), judged=("csv_ok",),
                        reads=r"/logs/synthetic-tanh-lightning/lightning_logs/version_\d+/metrics\.csv$")
LIGHTNING_TB = Example("lightning_tiny", "train-tb.sh", healthy=LIGHTNING_CSV.healthy, nan=LIGHTNING_CSV.nan,
                       diverge=LIGHTNING_CSV.diverge, names=("train_loss", "val_loss"), judged=("tensorboard_ok",),
                       reads=r"/logs/synthetic-tanh-lightning$")
SUMMARY_WRITER = Example("summarywriter_loop", "train.sh", healthy=("--steps", "300", "--step-seconds", "0.02"),
                         nan=("--nan-at", "60", "--step-seconds", "0.05"),
                         diverge=("--diverge-at", "60", "--step-seconds", "0.05"),
                         names=("Loss/train", "Loss/eval", "grad_norm"), judged=("tensorboard_ok",),
                         reads=r"/runs/[A-Z][a-z]{2}\d{2}_\d{2}-\d{2}-\d{2}_[^/]+$")
# a folder name glued into a metric name: HF's/SummaryWriter's <Mon><DD>_<HH-MM-SS>_<host>, Lightning's version_N
RUN_FOLDER_IN_NAME = re.compile(r"(?:[A-Z][a-z]{2}\d{2}_\d{2}-\d{2}-\d{2}_[^/\s]+|version_\d+)/\S+")


def fresh_project(tmp_path: Path, example: Example, variant: str, *, backend: str | None) -> Project:
    """A new copy of the example (its own folder, job name and W&B dir), sharing one user state folder with the
    other runs of the test; `backend` None is the everyday default (sbatch on PATH)."""
    base = make_project(tmp_path / variant)  # for its environment: user config with short intervals, PATH, no site
    root = tmp_path / variant / example.folder
    shutil.copytree(REPO / "examples" / example.folder, root,
                    ignore=shutil.ignore_patterns("outputs", "logs", "runs", "wandb", "lightning_logs", "__pycache__",
                                                  "slurm-*.out"))
    name = f"{example.job_name()}-t{uuid.uuid4().hex[:6]}"
    script = root / example.script
    script.write_text(script.read_text().replace(f"--job-name={example.job_name()}\n", f"--job-name={name}\n", 1))
    env = {**base.env, "GUARDED_SBATCH_STATE_DIR": str(tmp_path / "state")}
    env.pop("GUARDED_SBATCH_BACKEND", None)
    env.pop("WANDB_DIR", None)
    if backend is not None:
        env["GUARDED_SBATCH_BACKEND"] = backend
    return Project(root, env, name)


@dataclass
class Launched:
    project: Project
    variant: str
    job_id: str
    record: dict


def launch(tmp_path: Path, example: Example, variant: str, *, backend: str | None,
           project: Project | None = None) -> Launched:
    """Launch one kind of run on a fresh copy of the example (or again in `project`)."""
    framework = {"hf_trainer": "transformers", "lightning_tiny": "lightning"}.get(example.folder, "torch")
    require(importlib.util.find_spec(framework) is not None, f"{framework} not installed (pip install -e '.[frameworks]')")
    project = project or fresh_project(tmp_path, example, variant, backend=backend)
    result = project.cli(example.script, *getattr(example, variant), timeout=180)
    assert result.returncode == 0, f"{variant}: exit {result.returncode}\n{result.stderr}"
    assert "--guard" not in " ".join([example.script, *getattr(example, variant)])
    job_id = submitted_job_id(result.stdout)
    assert result.stdout.strip() == f"Submitted batch job {job_id}"
    return Launched(project, variant, job_id, project.run_record(job_id))


def wait_until_ended(runs: list[Launched], scheduler: Callable[[Launched], Scheduler], timeout: float) -> None:
    for run in runs:
        sched = scheduler(run)
        wait_for(lambda: sched.state(run.job_id).is_terminal, timeout, 1, f"the {run.variant} training job to end")
        sidecar = run.record["sidecar_id"]
        wait_for(lambda: sched.state(sidecar).is_terminal, 90, 1, f"the {run.variant} run's sidecar to end")


def assert_outcome(run: Launched, example: Example, scheduler: Scheduler, *, show: bool = True) -> None:
    """Healthy: COMPLETED, never stopped. NaN / diverging: STOPped and cancelled. Either way the reports (the
    sidecar's, and `show RUN` unless `show` is False) name the metrics as the trainer wrote them, never with the
    run's folder glued in."""
    output = run.project.sidecar_output(run.job_id)
    state = scheduler.state(run.job_id)
    sidecar = scheduler.info(run.record["sidecar_id"])
    assert sidecar.state is JobState.COMPLETED and sidecar.exit_code == 0, (run.variant, sidecar, output[-3000:])
    assert any(f"- Data source: {label}" in output for label in example.judged), (run.variant, output[-3000:])
    judged = re.findall(rf"^- Run: \S+ \(job {run.job_id}\) — (.+)$", output, re.MULTILINE)
    assert judged and re.search(example.reads, judged[-1]), (run.variant, judged)  # the trainer's files, not its log
    if run.variant == "healthy":
        assert state is JobState.COMPLETED, (state, output[-3000:])
        assert "Decision: STOP" not in output and "FINAL_SUMMARY" not in output and "ended COMPLETED" in output
    else:
        assert state is JobState.CANCELLED, (run.variant, state, output[-3000:])
        assert "FINAL_SUMMARY" in output and "- Decision: STOP" in output, output[-3000:]
        evidence = run.project.state_dir / "runs" / run.record["run_id"] / "evidence" / "evidence.json"
        verdict = json.loads(evidence.read_text())["verdict"]
        assert verdict["decision"] == "STOP" and verdict["reason"] in STOP_REASONS, verdict
    for name in example.names:
        assert re.search(rf"(?<![\w/]){re.escape(name)}[=:]", output), (run.variant, name, output[-3000:])
    shown = run.project.cli_here("show", run.record["run_id"]).stdout if show else ""
    if show:
        assert f"\n{example.names[0]} (train_loss)" in shown, (run.variant, shown[-3000:])
    assert not RUN_FOLDER_IN_NAME.search(metric_lines(output + shown)), (run.variant, output[-3000:])


def metric_lines(text: str) -> str:
    """The lines that name metrics (not the paths of the files read)."""
    keep = ("- Recent metrics:", "- Anomalies:", "- Reason:", "Anomalies:", "judged now")
    return "\n".join(line for line in text.splitlines()
                     if line.lstrip().startswith(keep) or re.match(r"^\S+ \((train_loss|key_metric|lr)\)", line))


def assert_status(runs: list[Launched]) -> None:
    """`status --json` (one call for the runs, which share a state folder): each stopped run's row says the guard
    stopped it and why, with metric names as written; the healthy one's row says COMPLETED."""
    listed = runs[0].project.cli_here("status", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {row["job_id"]: row for row in json.loads(listed.stdout)["runs"]}
    for run in runs:
        row = rows[run.job_id]
        if run.variant == "healthy":
            assert row["state"] == "COMPLETED" and row["decision"] != "STOP", row
        else:
            assert row["state"] == "CANCELLED" and row["stopped_by"] == "guard" and row["reason"] in STOP_REASONS, row
        assert not RUN_FOLDER_IN_NAME.search(row["message"] or ""), row
