"""Hard faults first, whatever the history's length; "too early" holds back soft findings only."""

from __future__ import annotations

import math
from pathlib import Path

from package_extras import history_read
from guarded_sbatch.sources.points import MetricPoint as P
from guarded_sbatch.judge import Decision, MetricHistory, decide
from guarded_sbatch.sources.textlog import TextLogSource

NAN = math.nan


def _verdict(points: list[P]) -> tuple[str, str]:
    verdict = decide(MetricHistory.from_points(points))
    return verdict.decision.value, verdict.reason.value


def test_a_nan_loss_with_one_finite_point_before_it() -> None:
    assert _verdict([P(10, 0, "loss", 2.0), P(20, 0, "loss", NAN)]) == ("WAIT", "non_finite_loss")
    assert _verdict([P(10, 0, "loss", 2.0), P(20, 0, "loss", NAN), P(30, 0, "loss", NAN)]) == \
        ("STOP", "non_finite_loss")
    assert _verdict([P(10, 0, "loss", 2.0), P(20, 0, "loss", 2.1), P(30, 0, "loss", 4e12), P(40, 0, "loss", NAN)]) == \
        ("STOP", "non_finite_loss")  # right after an explosion: the first NaN is enough


def test_fp16_exceptions_stay() -> None:
    skipped = [P(s, 0, "loss", 1.0 / s) for s in range(1, 40)] + [P(s, 0, "loss_scale", 2.0 ** 16) for s in range(1, 30)]
    skipped += [P(s, 0, "loss_scale", 2.0 ** 15) for s in range(30, 40)]  # the scale dropped at step 30
    skipped += [P(s, 0, "grad_norm", 1.0) for s in range(1, 40) if s != 30] + [P(30, 0, "grad_norm", math.inf)]
    assert _verdict(skipped)[0] == "CONTINUE"  # inf grad norm on the skipped step, finite loss: normal
    once = [P(s, 0, "loss", 1.0 / s) for s in range(1, 40)]
    once[20] = P(21, 0, "loss", NAN)  # one overflow the scaler absorbed
    assert _verdict(once)[0] != "STOP"


def test_a_collapsing_loss_scale_stops_with_no_loss_point() -> None:
    scale = [P(100 + i, 0, "loss_scale", 2.0 ** (7 - i)) for i in range(10)]
    assert _verdict(scale) == ("STOP", "loss_scale_collapse")
    startup = [P(1 + i, 0, "loss_scale", 2.0 ** (32 - i)) for i in range(16)]  # DeepSpeed's initial search
    assert _verdict(startup)[0] != "STOP"


def test_an_optimizer_exiting_line_stops_with_no_loss_point(tmp_path: Path) -> None:
    log = tmp_path / "out.log"
    log.write_text("[2023-11-07 01:55:40,300] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 "
                   "Skipping step. Attempted loss scale: 1, reducing to 1\n"
                   "Exception: Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.\n")
    verdict = decide(history_read(TextLogSource(log)))
    assert verdict.decision is Decision.STOP and verdict.reason.value == "crashed", verdict.message


def test_too_early_holds_back_soft_findings_only() -> None:
    jump = [P(1, 0, "loss", 1.0), P(2, 0, "loss", 9.0), P(3, 0, "loss", 9.5), P(4, 0, "loss", 9.2)]
    assert _verdict(jump) == ("WAIT", "divergence")  # a short window's jump: named, not "too early", not STOP
    calm = [P(1, 0, "loss", 2.0), P(2, 0, "loss", 1.9)]
    assert _verdict(calm) == ("CONTINUE", "healthy")  # nothing wrong in 2 points: healthy so far (issue 37)
    rising = [P(1, 0, "loss", 2.0), P(2, 0, "loss", 2.5)]
    assert _verdict(rising) == ("WAIT", "too_early")  # too few points to call a rise
