"""The ETA of a run counted in steps (max_steps, no epochs), from the reference's time per step: from a real
Hugging Face Trainer log (its train_steps_per_second), and from a reference that timed its epochs and says how
many steps an epoch has. Through `guarded-sbatch check --json`, as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from e2e_helpers import Project, make_project

REFERENCE = "experiments/synthetic-tanh-mlp-baseline"
HF_TRAINER = """
import sys, torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
class Tokens(Dataset):
    def __len__(self): return 64
    def __getitem__(self, i):
        ids = torch.randint(0, 64, (16,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}
model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=1, n_head=2))
args = TrainingArguments(output_dir=sys.argv[1], max_steps=16, per_device_train_batch_size=4, logging_steps=4,
                         report_to=[], save_strategy="no", use_cpu=True)
Trainer(model=model, args=args, train_dataset=Tokens()).train()
"""


def _step_based(project: Project) -> None:
    config = project.root / "configs" / "synthetic-tanh-mlp.yaml"
    config.write_text(config.read_text().replace("epochs: 3\nsteps_per_epoch: 200\n", "max_steps: 1200\n"))


def _eta(project: Project) -> dict:
    result = project.cli_here("check", "--json", "--guard-backend", "local", "train.sh")
    report = json.loads(result.stdout)
    return next(check for check in report["checks"] if check["name"] == "eta")


def test_eta_from_a_reference_that_timed_its_epochs(tmp_path: Path) -> None:
    project = make_project(tmp_path, history=True)
    _step_based(project)
    eta = _eta(project)
    assert eta["status"] != "failed" and eta["finding"].startswith("ends about"), eta
    (line,) = [e for e in eta["evidence"] if " steps (" in e]
    assert line.startswith("1200 steps (config key max_steps=1200) × ") and "/ steps_per_epoch=200" in line, line


def test_eta_from_a_real_hugging_face_log(tmp_path: Path) -> None:
    project = make_project(tmp_path, history=True)
    _step_based(project)
    run = subprocess.run([sys.executable, "-c", HF_TRAINER, str(tmp_path / "hf")], capture_output=True, text=True,
                         timeout=240)
    assert run.returncode == 0, run.stderr[-3000:]
    log = project.root / REFERENCE / "train.log"
    log.write_text(run.stdout + run.stderr)  # what the job's output file holds
    assert "train_steps_per_second" in log.read_text()
    eta = _eta(project)
    # the pace is this machine's: on a loaded one 1200 steps may outrun train.sh's 15 min limit (a FAILED that says so)
    assert eta["finding"].startswith(("ends about", "the run needs")), eta
    (line,) = [e for e in eta["evidence"] if " steps (" in e]
    assert line.startswith("1200 steps (config key max_steps=1200) × ") and "train_steps_per_second=" in line, line
    per_step = float(line.split(" × ")[1].split(" s per step")[0])
    assert 0 < per_step < 60, line


STAMPING_TRAINER = """
import logging, sys, time
logging.basicConfig(format="%(asctime)s %(levelname)s %(message)s", level=logging.INFO, stream=sys.stdout)
loss = 2.0
for step in range(1, 301):
    time.sleep(0.01)
    loss *= 0.995
    if step % 10 == 0:
        logging.info("step %d/300 loss %.4f", step, loss)
"""


@pytest.mark.parametrize("budget", ["steps", "epochs"])
def test_eta_from_the_timestamps_of_a_references_step_lines(tmp_path: Path, budget: str) -> None:
    """A log that says nothing of its pace but stamps every 10th step's line (Python's logging): the pace is learnt
    from those stamps, for a budget in steps or in epochs of so many steps."""
    project = make_project(tmp_path)
    if budget == "steps":
        _step_based(project)
    run = subprocess.run([sys.executable, "-c", STAMPING_TRAINER], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    reference = project.root / "finished-run"
    reference.mkdir()
    (reference / "config.yaml").write_text((project.root / REFERENCE / "config.yaml").read_text())
    (reference / "slurm-41.out").write_text(run.stdout)
    result = project.cli_here("check", "--json", "--guard-backend", "local", "--guard-reference", str(reference),
                              "train.sh")
    eta = next(check for check in json.loads(result.stdout)["checks"] if check["name"] == "eta")
    assert eta["finding"].startswith("ends about"), eta
    (line,) = [e for e in eta["evidence"] if " steps (" in e]
    assert "step 10→300 timestamps in" in line, line
    assert line.startswith("1200 steps (config key max_steps=1200)" if budget == "steps" else
                           "600 steps (epochs=3, steps_per_epoch=200)"), line
    per_step = float(line.split(" × ")[1].split(" s per step")[0])
    assert 0.005 < per_step < 0.5, line


def test_eta_from_the_wall_times_of_a_reference_tensorboard_run(tmp_path: Path) -> None:
    """A reference whose only record of its pace is its TensorBoard events (no log): the example trainer, run for
    real at 0.05 s a step, writes them with TensorBoard's own writer; the ETA reads seconds per step from them."""
    from finished_runs import record_finished_run, state_folder

    project = make_project(tmp_path)
    events = tmp_path / "reference-tb"
    trainer = subprocess.run([sys.executable, "train.py", "--config", "configs/synthetic-tanh-mlp.yaml", "--steps", "40",
                              "--step-seconds", "0.05", "--logdir", str(events), "--flush-secs", "0.2"],
                             cwd=project.root, capture_output=True, text=True, timeout=120)
    assert trainer.returncode == 0, trainer.stderr[-3000:]
    with state_folder(project.state_dir):
        record_finished_run(project.root / REFERENCE / "config.yaml", project.root, name=f"{project.name}-ref",
                            tb=events)
    _step_based(project)
    eta = _eta(project)
    assert eta["status"] != "failed" and eta["finding"].startswith("ends about"), eta
    (line,) = [e for e in eta["evidence"] if " steps (" in e]
    assert line.startswith("1200 steps (config key max_steps=1200) × ") and "TensorBoard events of" in line, line
    seconds = float(line.split(" × ")[1].split(" s per step")[0])
    assert 0.05 <= seconds < 1.0, line  # the trainer's sleep is the floor of its pace


def test_a_step_budget_under_any_name_is_learnt_from_where_the_reference_ended(tmp_path: Path) -> None:
    """No known budget key: the reference's config holds `iters: 300` and its log ends at step 300, so `iters` is the
    budget; this run's `iters: 600` is timed by the reference's pace. Without such a key the check says the pace is
    known and the budget is not (never that the log shows no step time)."""
    project = make_project(tmp_path)
    config = project.root / "configs" / "synthetic-tanh-mlp.yaml"
    base = config.read_text()
    config.write_text(base.replace("epochs: 3\nsteps_per_epoch: 200\n", "iters: 600\n"))
    run = subprocess.run([sys.executable, "-c", STAMPING_TRAINER], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    reference = project.root / "finished-run"
    reference.mkdir()
    (reference / "config.yaml").write_text(base.replace("epochs: 3\nsteps_per_epoch: 200\n", "iters: 300\n"))
    (reference / "slurm-41.out").write_text(run.stdout)

    def eta() -> dict:
        result = project.cli_here("check", "--json", "--guard-backend", "local", "--guard-reference", str(reference),
                                  "train.sh")
        return next(check for check in json.loads(result.stdout)["checks"] if check["name"] == "eta")

    learnt = eta()
    assert learnt["finding"].startswith("ends about"), learnt
    (line,) = [e for e in learnt["evidence"] if " steps (" in e]
    assert line.startswith("600 steps (config key iters=600: the reference's log ends at step 300 with iters=300)"), line
    config.write_text(base.replace("epochs: 3\nsteps_per_epoch: 200\n", "rounds: 600\n"))
    unknown = eta()
    assert "s per step (step 10→300 timestamps in" in unknown["finding"], unknown
    assert "number of steps is unknown" in unknown["finding"] and "shows no epoch or step time" not in unknown["finding"]
