"""find_pairs: the key in front of each number of a log line (textlog_tokens._key_before), pinned on the shapes
trainers print: `k: v`, `k=v`, several words, keys attached to a previous pair, quoted keys, clock ranges."""

from __future__ import annotations

import math

import pytest

from guarded_sbatch.sources.textlog_tokens import find_pairs


@pytest.mark.parametrize(("line", "pairs"), [
    ("loss: 2.3 lr=1e-4", [("loss", 2.3, 6), ("lr", 0.0001, 13)]),
    ("train loss 0.5", [("train loss", 0.5, 11)]),
    ("a b c d e f g 3", [("d e f g", 3.0, 14)]),  # at most four words
    ("epoch=0/micro_step=40 loss=1.5", [("epoch", 0.0, 6), ("micro_step", 40.0, 19), ("loss", 1.5, 27)]),
    ("{'loss': 2.31, 'grad_norm': 0.9}", [("loss", 2.31, 9), ("grad_norm", 0.9, 28)]),
    ("eta 1:39:15-2 loss 0.2", [("loss", 0.2, 19)]),  # a clock time and a range have no key
    ("iteration 100/ 2000 | lm loss: 2.1E+00 |", [("iteration", 100.0, 10), ("lm loss", 2.1, 31)]),
    ("val_acc (best) 0.91", []),
    ("nan 4", []),  # a non-finite word is never a key
    ("x = -0.5", [("x", -0.5, 4)]),
    ("time-- 3", [("time--", 3.0, 7)]),
])
def test_each_number_gets_the_key_before_it(line: str, pairs: list[tuple[str, float, int]]) -> None:
    assert find_pairs(line) == pairs


def test_a_non_finite_value_keeps_its_attached_key() -> None:
    (step, loss) = find_pairs("[step=190 loss=nan")
    assert step == ("step", 190.0, 6)
    assert loss[0] == "loss" and math.isnan(loss[1]) and loss[2] == 15
