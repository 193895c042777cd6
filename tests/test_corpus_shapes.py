"""The shapes of issue 25 through the real CLI (`monitor --once --json --log`) and the real reader, on the corpus
logs written by real trainers (make_real_logs.py) and by the formats' own strings (corpus_shapes.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from guarded_sbatch.cli.monitor import ONCE_EXIT

from guarded_sbatch.sources.points import MetricPoint
from guarded_sbatch.judge import Decision, MetricHistory, decide
from guarded_sbatch.sources.textlog import TextLogSource
from textlog_corpus import CORPUS, read_all, read_history


def _monitor(log: Path, state: Path) -> dict:
    result = subprocess.run(
        [sys.executable, "-m", "guarded_sbatch", "monitor", "--once", "--json", "--log", str(log),
         "--state-dir", str(state)], capture_output=True, text=True, timeout=120)
    payload = json.loads(result.stdout)
    assert result.returncode == ONCE_EXIT[payload["decision"]], result.stderr  # the decision is the exit code
    return payload


@pytest.mark.parametrize(("name", "decision", "reason", "anomaly"), [
    ("hf_trainer_tqdm_crash", "STOP", "crashed", "crashed"),  # the traceback starts on the tqdm bar's line
    ("litgpt_cut", "WAIT", "divergence", "jump"),  # 1.7 once, then ~11 for eight points: never "healthy"
    ("fairseq_simple_collapse", "STOP", "loss_scale_collapse", "loss_scale_collapse"),  # one loss point
    ("nanogpt_explode", "STOP", "non_finite_loss", "nan"),
    ("lightning_real_healthy", "CONTINUE", "healthy", None),
])
def test_each_shape_through_the_cli(tmp_path: Path, name: str, decision: str, reason: str, anomaly: str | None) -> None:
    payload = _monitor(CORPUS / f"{name}.log", tmp_path)
    assert (payload["decision"], payload["reason"]) == (decision, reason), payload
    if anomaly:
        assert anomaly in [a["kind"] for a in payload["anomalies"]], payload


def test_the_hf_crash_is_named_by_its_root_error_and_found_in_any_read_sizes(tmp_path: Path) -> None:
    text = (CORPUS / "hf_trainer_tqdm_crash.log").read_bytes()
    assert b"it/s]Traceback (most recent call last):" in text  # the real trainer wrote it so
    log = tmp_path / "out.log"
    log.write_bytes(b"")
    source = TextLogSource(log)
    history = MetricHistory()
    for start in range(0, len(text), 97):  # the job's output as a sidecar meets it: cut anywhere
        with open(log, "ab") as handle:
            handle.write(text[start : start + 97])
        history.read_from(source)
    verdict = decide(history)
    assert verdict.decision is Decision.STOP and verdict.message.startswith("crashed: torch.OutOfMemoryError"), \
        verdict.message
    assert history.keys() == ["epoch", "grad_norm", "learning_rate", "loss"]


def test_a_launcher_over_the_trainer_is_context_not_the_name(tmp_path: Path) -> None:
    """`accelerate launch` as it ends when its child dies of an OOM (its real output's shape: the child's traceback,
    accelerate's RuntimeError over it, then `raise ... from` its CalledProcessError)."""
    child = ("Traceback (most recent call last):\n  File \"/w/train.py\", line 5, in <module>\n"
             "    raise torch.OutOfMemoryError(\"CUDA out of memory.\")\ntorch.OutOfMemoryError: CUDA out of memory. "
             "Tried to allocate 2.00 GiB.\n")
    log = tmp_path / "out.log"
    log.write_text("".join(f"step {s} loss {3 / s:.4f} lr 1e-03\n" for s in range(1, 31)) + child +
                   "RuntimeError: " + child + "\n\nThe above exception was the direct cause of the following "
                   "exception:\n\nTraceback (most recent call last):\n  File \"/venv/bin/accelerate\", line 6, in "
                   "<module>\n    sys.exit(main())\n    raise subprocess.CalledProcessError(\nsubprocess."
                   "CalledProcessError: Command '['/venv/bin/python', 'train.py']' returned non-zero exit status 1.\n")
    verdict = decide(read_history(log))
    assert verdict.message == ("crashed: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
                               "(raised as subprocess.CalledProcessError)"), verdict.message


def test_lightning_bars_are_read_on_the_step_axis_they_count(tmp_path: Path) -> None:
    expected = json.loads((CORPUS / "lightning_real_healthy.expected.json").read_text())
    assert _monitor(CORPUS / "lightning_real_healthy.log", tmp_path)["last_step"] == 120 == expected["triples"][-1][0]
    rich = _monitor(CORPUS / "lightning_rich_healthy.log", tmp_path / "rich")
    # rich prints one frame: one point, nothing wrong in it: healthy so far (a hard finding would decide on it alone)
    assert rich["last_step"] == 120 and rich["reason"] == "healthy"


def test_start_up_summaries_are_not_metrics_and_no_loss_yet_is_start_up(tmp_path: Path) -> None:
    log = tmp_path / "out.log"
    lightning = (CORPUS / "lightning_real_healthy.log").read_text().split("Training:")[0]
    older = ("  | Name  | Type   | Params | Mode\n0 | layer | Linear | 66     | train\n66        Trainable params\n"
             "0         Non-trainable params\n66        Total params\n0.000     Total estimated model params size (MB)\n"
             "1         Modules in train mode\n")  # Lightning < 2.5's summary
    log.write_text("model params: 0.42M\nnumber of parameters: 124.44M\nnum_parameters = 1234\n" + older + lightning)
    assert read_all(log) == []
    log.write_text(log.read_text() + "tokens per iteration will be: 491,520\n")
    payload = _monitor(log, tmp_path / "a")
    assert (payload["decision"], payload["reason"]) == ("WAIT", "too_early"), payload
    assert "name the loss key" not in payload["reason"] and "start-up" in json.dumps(payload)
    log.write_text(log.read_text() + "".join(f"iter {i}: mfu {15 + i / 100:.2f}%\n" for i in range(0, 300, 10)))
    payload = _monitor(log, tmp_path / "b")  # logged for a while, still no loss: unguarded, and the advice is right
    assert payload["reason"] == "unguarded" and "--train-loss-key" in payload["message"], payload


def _first_stop(points: list[MetricPoint]) -> int | None:
    history = MetricHistory()
    for step in sorted({p.step for p in points}):
        history.add([p for p in points if p.step == step])
        if decide(history).decision is Decision.STOP:
            return step
    return None


def test_nan_stops_at_the_first_nan_after_an_explosion_and_at_the_second_otherwise() -> None:
    points = read_all(CORPUS / "nanogpt_explode.log")
    assert _first_stop(points) == 100  # 1.9e19 at 100 (NaN at 110): 20 orders of magnitude decide at once (issue 37)
    plain = [p for p in points if not (p.key == "loss" and p.step == 100)]
    assert _first_stop(plain) == 120  # no explosion before it: the second logged NaN
    isolated = [p._replace(value=0.1) if p.key == "loss" and p.step == 120 else p for p in plain]
    assert _first_stop(isolated) is None  # one NaN the run got over (an fp16 overflow): never a STOP
