"""Plots people would look at. A real run the guard stopped, shown in a real tmux of 80 x 50: one panel per
role (training loss on a log scale once it spans decades, eval metric, lr, grad norm), whole titles, short
tick labels, the divergence marked, the whole view on one screen; its PNG has the same panels, the run's
name and the anomaly lines. A real Hugging Face Trainer run's curves are chosen by role: train/loss, eval/loss,
learning rate and grad norm, never eval/runtime or eval/samples_per_second."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from e2e_helpers import Project, make_project, submitted_job_id, wait_for
from guarded_sbatch.scheduler.local import LocalScheduler

TB = "runs/synthetic-tanh-mlp-bs64-lr5e-2"


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Project, str]:
    project = make_project(tmp_path_factory.mktemp("plots"), fast_interval=1.0)
    result = project.cli("--guard-backend", "local", "--guard-tb", TB, "train.sh", "--steps", "3000",
                         "--diverge-at", "150", "--step-seconds", "0.01")
    assert result.returncode == 0, result.stderr
    job_id = submitted_job_id(result.stdout)
    sidecar = project.run_record(job_id)["sidecar_id"]
    scheduler = LocalScheduler(project.state_dir / "local-jobs")
    wait_for(lambda: scheduler.state(sidecar).is_terminal, 150, what="the sidecar to stop the run")
    return project, job_id


def _tmux_screen(project: Project, *args: str, width: int = 80, height: int = 50) -> list[str]:
    if shutil.which("tmux") is None:
        pytest.fail("tmux is needed for this test (scripts/test installs it)")
    session = f"show-{uuid.uuid4().hex[:8]}"
    env = " ".join(f"{k}={v}" for k, v in project.env.items() if k.startswith("GUARDED_SBATCH_"))
    command = f"cd {project.root} && env {env} TERM=xterm-256color {sys.executable} -m guarded_sbatch {' '.join(args)}; " \
              f"echo SHOW-EXIT-$?; sleep 60"
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", str(width), "-y", str(height), command],
                   check=True, timeout=30, env={**project.env, "TMUX": ""})
    try:
        screen: list[str] = []
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            captured = subprocess.run(["tmux", "capture-pane", "-p", "-t", session, "-S", "-200"], capture_output=True,
                                      text=True, timeout=30).stdout
            screen = captured.rstrip("\n").split("\n")
            if any(line.startswith("SHOW-EXIT-") for line in screen):
                break
            time.sleep(0.3)
        return screen
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], timeout=30, check=False)


def test_show_in_80_columns_of_a_real_tmux(stopped_run: tuple[Project, str]) -> None:
    project, job_id = stopped_run
    screen = _tmux_screen(project, "show", job_id)
    assert "SHOW-EXIT-0" in screen, screen
    used = screen[: screen.index("SHOW-EXIT-0")]
    shown = "\n".join(used)
    visible = used[-50:]  # what the 50-line terminal shows once it has printed
    titles = [line.strip() for line in visible if "(training loss)" in line or "(eval metric)" in line
              or "(learning rate)" in line or "(grad norm)" in line]
    assert [t.split(" (")[0] for t in titles] == ["train/loss", "eval/loss", "train/lr", "train/grad_norm"], shown
    # was 77 lines of 80 columns, with three plots only; 64 with a one-line reason (which evidence decided first is
    # the sidecar's timing: a NaN is one line, an explosion's numbers wrap to four)
    reason = next(i for i, line in enumerate(used) if line.startswith("- Reason:"))
    reason_lines = next(i for i, line in enumerate(used) if line.startswith("- Last step:")) - reason
    # +2: the guard's STOP as it was taken (its step and reason) and the header's stopper may each wrap to a line more
    assert len(used) <= 65 + reason_lines, shown
    loss_title = titles[0]
    assert "log scale" in loss_title and "…" not in loss_title, shown  # whole, on a log scale (it diverged)
    marked = used[used.index(next(line for line in used if "(training loss)" in line)):]
    # the guard may stop it at the explosion (its points end there) or after the loss went non-finite
    assert re.search(r"marked: ((NaN|-?Infinity) from step \d+|\w+ at \d+)", "\n".join(marked)), shown
    labels = [line.split("┤")[0].strip() for line in used if "┤" in line]
    assert labels and max(len(label) for label in labels) <= 9, labels  # 3 significant digits, not 36
    assert all(len(line) <= 80 for line in used)


def test_the_png_has_the_panels_the_run_name_and_the_anomalies(stopped_run: tuple[Project, str], tmp_path: Path) -> None:
    from guarded_sbatch.actions.evidence_plot import _from_input, build_figure

    project, job_id = stopped_run
    png = tmp_path / "run.png"
    assert project.cli_here("show", job_id, "--png", str(png), check=True).returncode == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    shown = json.loads(project.cli_here("show", job_id, "--json", check=True).stdout)
    assert set(shown["plotted"]) == {"train_loss", "key_metric", "lr", "grad_norm"}
    evidence = json.loads(Path(next(p for p in shown["evidence"] if p.endswith("evidence.json"))).read_text())
    series = {k: (v["steps"], v["values"]) for k, v in evidence["recent_metrics"].items()}
    _, verdict, _ = _from_input({"series": {k: {"steps": s, "values": v} for k, (s, v) in series.items()},
                                 "verdict": evidence["verdict"]})
    figure = build_figure({k: (s, [float(x) for x in v]) for k, (s, v) in series.items()}, verdict, shown["run"])
    axes = [ax for ax in figure.axes if ax.get_visible()]
    titles = [ax.get_title() for ax in axes]
    assert [t.split(":")[0] for t in titles] == ["training loss", "eval metric", "learning rate", "grad norm"]
    assert shown["run"] in figure._suptitle.get_text() and "STOP" in figure._suptitle.get_text()
    assert axes[0].get_yscale() == "log"
    anomaly_steps = {a["step"] for a in evidence["verdict"]["anomalies"]}
    assert any(line.get_xdata()[0] in anomaly_steps for line in axes[0].get_lines()[1:]), "no anomaly line"


HF_TRAINER = """
import sys, torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
class Tokens(Dataset):
    def __init__(self, n): self.n = n
    def __len__(self): return self.n
    def __getitem__(self, i):
        ids = torch.randint(0, 64, (16,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}
model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=1, n_head=2))
args = TrainingArguments(output_dir=sys.argv[1], max_steps=12, per_device_train_batch_size=4, logging_steps=2,
                         eval_strategy="steps", eval_steps=4, report_to=["tensorboard"], save_strategy="no",
                         use_cpu=True, disable_tqdm=True)
Trainer(model=model, args=args, train_dataset=Tokens(48), eval_dataset=Tokens(8)).train()
"""


def test_a_hugging_face_run_is_plotted_by_role(tmp_path: Path) -> None:
    from guarded_sbatch import read_metrics
    from guarded_sbatch.actions.evidence_plot import plotted_keys

    done = subprocess.run([sys.executable, "-c", HF_TRAINER, str(tmp_path / "out")], capture_output=True, text=True,
                          timeout=240, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (logdir,) = (tmp_path / "out" / "runs").iterdir()  # output_dir/runs/<date>_<host>
    keys = {p.key for p in read_metrics("tensorboard", logdir)}
    assert {"eval/runtime", "eval/samples_per_second", "train/loss", "eval/loss"} <= keys, keys
    assert plotted_keys(keys) == {"train_loss": "train/loss", "key_metric": "eval/loss",
                                  "lr": "train/learning_rate", "grad_norm": "train/grad_norm"}


def test_a_loss_that_grows_to_near_the_float_limit_is_still_plotted(tmp_path: Path) -> None:
    """A diverging loss reaches 1e289 before its NaN; matplotlib's log axis overflowed on it and the evidence had no
    plot. Larger magnitudes are drawn at the plot's bound, and the panel says so."""
    from guarded_sbatch.actions.evidence_plot import build_figure, plot_metrics
    from guarded_sbatch.judge.verdict import Anomaly, Decision, Reason, Verdict

    steps = list(range(10, 160, 10))
    loss = [0.93, 0.30, 0.28, 0.29, 0.21, 0.22, 4.6e39, 1.7e82, 4.5e124, 3.0e165, 2.8e207, 3.3e248, 8.0e289,
            float("nan"), float("nan")]
    series = {"loss": (steps, loss), "grad_norm": (steps, [2.4, 0.75, 1.1, 1.0, 0.7, 0.6, 3e20, 6e41, 8e62, 2e83,
                                                           2e104, 7e124, 3.9e145, float("nan"), float("nan")])}
    verdict = Verdict(Decision.STOP, Reason.NON_FINITE_LOSS, "training loss is nan", (Anomaly("nan", "loss", 140),), 150)
    plot_metrics(tmp_path / "metrics.png", series, verdict, "diverged")
    assert (tmp_path / "metrics.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    titles = [ax.get_title() for ax in build_figure(series, verdict, "diverged").axes if ax.get_visible()]
    assert any("loss" in t and "log scale" in t and "drawn at it" in t for t in titles), titles
