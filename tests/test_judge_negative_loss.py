"""A loss below 0 where its kind cannot be (judge/checks_sign.py), on logs written as their trainers print them and
read by the real text reader (TextLogSource); each broken case beside a healthy twin the rule must leave alone: a
Gaussian NLL sliding through 0, a GAN's critic below 0, a negative SI-SNR, a flow's loss swinging into negatives."""

from __future__ import annotations

from pathlib import Path

import pytest

from package_extras import history_read
from guarded_sbatch.judge import decide
from guarded_sbatch.judge.checks_sign import kind_by_name
from guarded_sbatch.judge.table import policy_from_table
from guarded_sbatch.judge.verdict import Verdict
from guarded_sbatch.sources.textlog import TextLogSource

YOLO_HEADER = "      Epoch    GPU_mem   box_loss   cls_loss   dfl_loss  Instances       Size\n"


def _judge(tmp_path: Path, text: str, name: str = "train.log", **policy: int) -> Verdict:
    log = tmp_path / name
    log.write_text(text)
    return decide(history_read(TextLogSource(log)), policy_from_table(policy) if policy else None)


def _pair(verdict: Verdict) -> tuple[str, str]:
    return verdict.decision.value, verdict.reason.value


def _yolo(box_losses: list[float]) -> str:
    """Ultralytics' epoch lines, as ultralytics/ultralytics#21765 pasted them (the progress bar in ASCII)."""
    out = ""
    for epoch, box in enumerate(box_losses, 1):
        out += YOLO_HEADER + (f"      {epoch}/55      9.94G    {box:7.4f}      {7.3 - 0.2 * epoch:.3f}      "
                              f"{3.2 - 0.02 * epoch:.3f}          9        640: 100%|##########| 787/787 "
                              "[09:08<00:00,  1.43it/s]\n")
        out += f"                   all       1049       1186      0.886      0.832      0.899      0.{490 + epoch}\n\n"
    return out


def _steps(name: str, values: list[float]) -> str:
    return "".join(f"step {10 * (i + 1)} {name} {v:.4f}\n" for i, v in enumerate(values))


def test_a_box_loss_below_zero_at_every_epoch_read_stops_a_first_sighting_waits(tmp_path: Path) -> None:
    verdict = _judge(tmp_path, _yolo([-0.2335, -0.2325, -0.2322]))
    assert _pair(verdict) == ("STOP", "negative_loss") and "at every point read" in verdict.message
    assert "box_loss -0.2322" in verdict.message and any(a.kind == "negative_loss" for a in verdict.anomalies)
    assert _pair(_judge(tmp_path, _yolo([-0.2335]), "one.log")) == ("WAIT", "negative_loss")
    assert _pair(_judge(tmp_path, _yolo([0.9, 0.85, 0.8, -0.2335]), "after.log")) == ("WAIT", "negative_loss")
    assert _pair(_judge(tmp_path, _yolo([0.2335, 0.2325, 0.2322]), "twin.log")) == ("CONTINUE", "healthy")


def test_a_box_loss_that_stays_below_zero_is_a_stop(tmp_path: Path) -> None:
    below = [0.9, 0.85, 0.8] + [-0.2335 + 0.001 * i for i in range(6)]  # positive first: the count decides
    verdict = _judge(tmp_path, _yolo(below))
    assert _pair(verdict) == ("STOP", "negative_loss") and "persists" in verdict.message
    # the number of points is a threshold: asked for more, the same log is still a WAIT
    assert _pair(_judge(tmp_path, _yolo(below), "patient.log", negative_loss_points=10)) == ("WAIT", "negative_loss")
    assert _judge(tmp_path, _yolo([0.9, 0.85, 0.8] + [0.2335 - 0.001 * i for i in range(6)]), "twin.log"
                  ).decision.value == "CONTINUE"


def test_a_named_loss_that_dipped_below_zero_and_came_back_is_no_sign_now(tmp_path: Path) -> None:
    dipped = [0.9, 0.85, 0.8, -0.3, 0.75, 0.7, 0.68]
    assert _judge(tmp_path, _yolo(dipped)).reason.value != "negative_loss"
    assert _pair(_judge(tmp_path, _yolo(dipped[:4]), "newest.log")) == ("WAIT", "negative_loss")


def test_an_mse_loss_negative_from_the_start_stops(tmp_path: Path) -> None:
    assert _pair(_judge(tmp_path, _steps("mse_loss", [-0.5 - 0.01 * i for i in range(8)]))) == ("STOP", "negative_loss")
    assert _pair(_judge(tmp_path, _steps("mse_loss", [0.5 - 0.01 * i for i in range(8)]), "twin.log")) == (
        "CONTINUE", "healthy")


def test_a_steady_positive_loss_that_jumps_below_zero(tmp_path: Path) -> None:
    steady = [2.3 - 0.05 * i for i in range(10)]
    verdict = _judge(tmp_path, _steps("loss", [*steady, -1.9]))
    assert _pair(verdict) == ("WAIT", "negative_loss") and "jumped below" in verdict.message
    # as far below 0 as it sat above it: a mirrored loss, a sign bug
    assert _pair(_judge(tmp_path, _steps("loss", [*steady, -1.9, -2.6]), "mirror.log")) == ("STOP", "negative_loss")


def test_a_gaussian_nll_sliding_through_zero_is_left_alone(tmp_path: Path) -> None:
    nll = [1.0 - 0.15 * i for i in range(14)]  # 1.0 down to -0.95: a density's NLL as the model grows confident
    assert _pair(_judge(tmp_path, _steps("loss", nll))) == ("CONTINUE", "healthy")
    assert _pair(_judge(tmp_path, _steps("nll", nll), "nll.log")) == ("CONTINUE", "healthy")
    # even a jump below 0: the name says a likelihood may be negative
    steady = [2.3 - 0.05 * i for i in range(10)]
    assert _judge(tmp_path, _steps("train_nll", [*steady, -1.9, -2.6]), "jump.log").reason.value != "negative_loss"


def test_a_flow_loss_swinging_into_negatives_is_left_alone(tmp_path: Path) -> None:
    # WaveGlow's first iterations (public corpus npuichigo_waveglow_5): not a steady positive level before the sign
    swing = [247.3, 2267.6, 2223.9, 21230.7, 900.0, -4516.5, -1636.3, -1802.4]
    assert _judge(tmp_path, _steps("loss", swing)).reason.value != "negative_loss"


def test_a_gan_critic_below_zero_is_left_alone(tmp_path: Path) -> None:
    text = "".join(f"step {10 * (i + 1)} loss_D {-0.2 - 0.1 * i:.3f} loss_G {1.5 - 0.05 * i:.3f}\n" for i in range(12))
    assert _pair(_judge(tmp_path, text)) == ("CONTINUE", "healthy")


def test_a_negative_si_snr_loss_is_left_alone(tmp_path: Path) -> None:
    assert _pair(_judge(tmp_path, _steps("si_snr_loss", [-2.0 - 0.8 * i for i in range(12)]))) == ("CONTINUE", "healthy")


def test_an_evaluation_box_loss_below_zero_is_named(tmp_path: Path) -> None:
    text = "".join(f"epoch {e} train_loss {2.0 - 0.1 * e:.3f} val/box_loss {v:.4f}\n"
                   for e, v in enumerate([0.4, 0.35, -0.2], 1))
    verdict = _judge(tmp_path, text)
    assert _pair(verdict) == ("WAIT", "negative_loss") and "val/box_loss" in verdict.message


@pytest.mark.parametrize(("key", "kind"), [
    ("box_loss", True), ("train/cls_loss", True), ("loss_ce", True), ("cross_entropy", True), ("ppl", True),
    ("loss", None), ("train_loss", None), ("loss_D", False), ("g_loss", False), ("nll", False), ("si-snr", False),
    ("loss_giou", True), ("giou", None),
    ("policy_entropy", False), ("kl_loss", False), ("contrastive_loss", False), ("dice_ce_loss", False),
])
def test_the_name_is_a_hint_either_way(key: str, kind: bool | None) -> None:
    assert kind_by_name(key) is kind
