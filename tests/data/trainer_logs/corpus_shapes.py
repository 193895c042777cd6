"""Generators, part 3: the shapes a sidecar sees when the history starts mid-run or the run breaks hard, in the
formats' own strings (the producers of SOURCES.md). Each is its own case, beside the format's healthy / nan /
scale / crash logs:

  litgpt_cut         a log cut from a running job (`tail -c`, a rotated log, a sidecar started late): loss about
                     1.7 at one iteration, then about 11 for the next eight. Not STOP: a WAIT naming the jump.
  fairseq_simple_collapse  the tail of a fairseq fp16 run: one training record, then the loss scale halved at
                     every update a dozen times in a row (valid loss far above its best), ending in a traceback
                     cut after its first line. STOP (loss-scale collapse), with one loss point.
  nanogpt_explode    loss 0.1, then 1.9e19, then NaN at consecutive logged iterations (every 10): STOP at the
                     first NaN after the explosion, and at the second NaN in any case.
"""

from __future__ import annotations

from collections.abc import Callable

from make_corpus import NAN, Log


def litgpt_cut() -> Log:
    log = Log()
    for index, loss in enumerate([1.7123] + [11.02 + 0.03 * i for i in range(8)]):
        iteration = 4000 + 8 * index
        text = f"{loss:.4f}"
        log.put(f"iter {iteration} step {iteration // 4}: loss {text}, iter time: {1261.5 + index:.2f}ms", iteration,
                [("loss", text), ("iter time", f"{1261.5 + index:.2f}")])
    return log


def fairseq_simple_collapse() -> Log:
    log = Log()
    step = 8400
    log.put(f"2020-03-23 14:02:44 | INFO | train_inner | epoch 024:    216 / 356 loss=4.107, ppl=17.23, wps=49604, "
            f"ups=0, wpb=277035.016, bsz=8563.074, num_updates={step}, lr=0.000312, gnorm=3.201, loss_scale=128, "
            "train_wall=12, wall=30560", step,
            [("loss", "4.107"), ("ppl", "17.23"), ("wps", "49604"), ("ups", "0"), ("wpb", "277035.016"),
             ("bsz", "8563.074"), ("lr", "0.000312"), ("gnorm", "3.201"), ("loss_scale", "128"),
             ("train_wall", "12"), ("wall", "30560")])
    log.put(f"2020-03-23 14:03:10 | INFO | valid | epoch 024 | valid on 'valid' subset | loss 9.84 | nll_loss 9.1 | "
            f"ppl 916.3 | num_updates {step} | best_loss 4.31", step,
            [("eval/loss", "9.84"), ("eval/nll_loss", "9.1"), ("eval/ppl", "916.3"), ("eval/best_loss", "4.31")])
    scale = 128.0
    for update in range(step + 1, step + 13):
        scale /= 2
        log.put(f"2020-03-23 14:03:{update - step + 11:02d} | INFO | fairseq.trainer | NOTE: gradient overflow "
                f"detected, ignoring gradient, setting loss scale to: {scale}", update, [("loss_scale", repr(scale))])
    log.put("Traceback (most recent call last):")  # the log ends here: the rest was not written yet
    return log


def nanogpt_explode() -> Log:
    log = Log()
    for iteration in range(0, 130, 10):
        loss = 0.1 + 0.001 * (iteration % 30) if iteration < 100 else 1.9e19 if iteration == 100 else NAN
        text = "nan" if loss != loss else f"{loss:.4f}"
        log.put(f"iter {iteration}: loss {text}, time {1097.23 + iteration:.2f}ms, mfu 15.34%", iteration,
                [("loss", text), ("time", f"{1097.23 + iteration:.2f}"), ("mfu", "15.34")])
    return log


# (format, case) -> generator: written as FORMAT_CASE.log, judged like the format's other logs
SHAPES: dict[tuple[str, str], Callable[[], Log]] = {
    ("litgpt", "cut"): litgpt_cut,
    ("fairseq_simple", "collapse"): fairseq_simple_collapse,
    ("nanogpt", "explode"): nanogpt_explode,
}
