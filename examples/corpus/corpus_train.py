"""Real small training runs in numpy: a one-hidden-layer ReLU MLP (softmax classifier or regressor)
on synthetic data, trained with real Adam or SGD + momentum, a warm-up + cosine LR schedule,
optional gradient clipping, and optional fp16 (float16 forward/backward with dynamic loss scaling,
so overflow and skipped steps really happen). Faults are real mechanisms switched on at a step:
an LR bug, corrupted input batches, a dead-ReLU initialisation, a corrupt held-out set.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

FP16_MAX_SCALE = 2.0**24


@dataclass(frozen=True)
class TrainSpec:
    task: Literal["classify", "regress"] = "classify"
    steps: int = 1000
    log_every: int = 5
    eval_every: int = 50
    optimizer: Literal["adam", "sgd"] = "adam"
    lr: float = 3e-3
    warmup_steps: int = 50
    schedule: Literal["cosine", "constant", "zero"] = "cosine"
    batch_size: int = 32
    n_train: int = 4000
    n_eval: int = 500
    n_features: int = 20
    n_classes: int = 4
    hidden: int = 32
    label_noise: float = 0.05
    target_scale: float = 1.0  # regression targets (and so the loss) in another scale
    init_bias: float = 0.0  # a very negative value kills every ReLU from the start
    grad_clip: float | None = None
    fp16: bool = False
    fp16_growth_interval: int = 50
    fp16_min_scale: float = 1.0
    # faults: (from_step, factor) pairs
    lr_multiplier_from: tuple[int, float] | None = None  # an LR bug from this step on
    bad_inputs: tuple[int, int, float] | None = None  # (first, last, scale): corrupted batches
    eval_set_has_nan: bool = False  # a corrupt row in the held-out file
    hf_nan_filter: bool = False  # log the train loss as HF's Trainer does (logging_nan_inf_filter)
    bad_rows: int | None = None  # with bad_inputs: only this many rows of the batch are corrupted
    label_corruption_from: tuple[int, float] | None = None  # (step, rate): a growing share of random labels
    eval_nan_at: tuple[int, ...] = ()  # evaluations at these steps read a corrupt shard (NaN)
    log_train_accuracy: bool = False  # the batch accuracy, as runs without a validation set log it


@dataclass
class LogRecord:
    step: int
    values: dict[str, float] = field(default_factory=dict)
    is_eval: bool = False


def _data(spec: TrainSpec, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    n = spec.n_train + spec.n_eval
    if spec.task == "classify":
        centers = rng.normal(scale=1.2, size=(spec.n_classes, spec.n_features))
        labels = rng.integers(0, spec.n_classes, size=n)
        x = centers[labels] + rng.normal(size=(n, spec.n_features))
        noisy = rng.random(n) < spec.label_noise
        labels = np.where(noisy, rng.integers(0, spec.n_classes, size=n), labels)
        y = labels
    else:
        true_w = rng.normal(size=(spec.n_features, 1)) / math.sqrt(spec.n_features)
        x = rng.normal(size=(n, spec.n_features))
        y = (np.tanh(x @ true_w * 2) + 0.1 * rng.normal(size=(n, 1))) * spec.target_scale
    x = x.astype(np.float32)
    x_eval = x[spec.n_train:].copy()
    if spec.eval_set_has_nan:
        x_eval[7, 3] = np.nan
    return x[: spec.n_train], y[: spec.n_train], x_eval, y[spec.n_train:]


def lr_at(spec: TrainSpec, step: int) -> float:
    if spec.schedule == "zero":
        return 0.0
    lr = spec.lr * min(1.0, step / max(1, spec.warmup_steps))
    if spec.schedule == "cosine" and step > spec.warmup_steps:
        progress = (step - spec.warmup_steps) / max(1, spec.steps - spec.warmup_steps)
        lr = spec.lr * 0.5 * (1 + math.cos(math.pi * progress))
    if spec.lr_multiplier_from is not None and step >= spec.lr_multiplier_from[0]:
        lr *= spec.lr_multiplier_from[1]
    return lr


class MLP:
    def __init__(self, spec: TrainSpec, rng: np.random.Generator) -> None:
        outputs = spec.n_classes if spec.task == "classify" else 1
        self.spec = spec
        self.params = {
            "w1": (rng.normal(size=(spec.n_features, spec.hidden)) * math.sqrt(2 / spec.n_features)).astype(np.float32),
            "b1": np.full(spec.hidden, spec.init_bias, dtype=np.float32),
            "w2": (rng.normal(size=(spec.hidden, outputs)) / math.sqrt(spec.hidden)).astype(np.float32),
            "b2": np.zeros(outputs, dtype=np.float32),
        }

    def loss_and_grads(
        self, x: np.ndarray, y: np.ndarray, dtype: type = np.float32, loss_scale: float = 1.0
    ) -> tuple[float, dict[str, np.ndarray], np.ndarray]:
        """Forward + backward in `dtype` (float16 for mixed precision); loss and softmax in float32."""
        p = {k: v.astype(dtype) for k, v in self.params.items()}
        xd = x.astype(dtype)
        pre = xd @ p["w1"] + p["b1"]
        h = np.maximum(pre, 0)
        out = (h @ p["w2"] + p["b2"]).astype(np.float32)
        batch = len(x)
        if self.spec.task == "classify":
            shifted = out - out.max(axis=1, keepdims=True)
            # exp() of very negative numbers is subnormal and slow: e^-80 is 0 for every purpose here
            log_probs = shifted - np.log(np.exp(np.maximum(shifted, -80)).sum(axis=1, keepdims=True))
            loss = float(-log_probs[np.arange(batch), y].mean())
            d_out = np.exp(np.maximum(log_probs, -80))
            d_out[np.arange(batch), y] -= 1
            d_out /= batch
        else:
            err = out - y
            loss = float(np.mean(err**2))
            d_out = 2 * err / batch
        d_out = (d_out * loss_scale).astype(dtype)
        grads = {"w2": h.T @ d_out, "b2": d_out.sum(0)}
        d_pre = (d_out @ p["w2"].T) * (pre > 0)
        grads["w1"] = xd.T @ d_pre
        grads["b1"] = d_pre.sum(0)
        return loss, {k: g.astype(np.float32) / np.float32(loss_scale) for k, g in grads.items()}, out

    def evaluate(self, x: np.ndarray, y: np.ndarray) -> dict[str, float]:
        loss, _, out = self.loss_and_grads(x, y)
        if self.spec.task == "classify":
            return {"eval/loss": loss, "eval/accuracy": float(np.mean(out.argmax(axis=1) == y))}
        return {"eval/loss": loss}


def train(spec: TrainSpec, seed: int = 0) -> Iterator[LogRecord]:
    """Run the training; yield what a trainer logs, at the steps it logs it."""
    rng = np.random.default_rng(seed)
    x_train, y_train, x_eval, y_eval = _data(spec, rng)
    model = MLP(spec, rng)
    # float64 moments: float32 squares of tiny gradients turn subnormal, and subnormal maths is slow
    moments = {k: (np.zeros(v.shape), np.zeros(v.shape)) for k, v in model.params.items()}
    loss_scale = 2.0**16 if spec.fp16 else 1.0
    good_steps = skipped_total = adam_t = 0
    hf_running = 0.0
    hf_since_log = 0
    with np.errstate(all="ignore"):  # a failing run overflows: that is the point of its fault
        for step in range(1, spec.steps + 1):
            idx = rng.integers(0, len(x_train), size=spec.batch_size)
            x, y = x_train[idx], y_train[idx]
            if spec.bad_inputs and spec.bad_inputs[0] <= step <= spec.bad_inputs[1]:
                rows = slice(0, spec.bad_rows) if spec.bad_rows else slice(None)
                x = x.copy()
                x[rows] = x[rows] * np.float32(spec.bad_inputs[2])
            if spec.label_corruption_from and step >= spec.label_corruption_from[0]:
                share = min(1.0, (step - spec.label_corruption_from[0]) * spec.label_corruption_from[1])
                flip = rng.random(len(y)) < share
                y = np.where(flip, rng.integers(0, spec.n_classes, size=len(y)), y)
            lr = lr_at(spec, step)
            dtype = np.float16 if spec.fp16 else np.float64  # float64: no slow subnormals near loss 0
            loss, grads, out = model.loss_and_grads(x, y, dtype, loss_scale)
            grad_norm = float(math.sqrt(sum(float(np.sum(g.astype(np.float64) ** 2)) for g in grads.values())))
            skipped = spec.fp16 and not math.isfinite(grad_norm)
            if skipped:
                skipped_total += 1
                loss_scale = max(spec.fp16_min_scale, loss_scale / 2)
                good_steps = 0
            else:
                if spec.fp16:
                    good_steps += 1
                    if good_steps % spec.fp16_growth_interval == 0:
                        loss_scale = min(FP16_MAX_SCALE, loss_scale * 2)
                if spec.grad_clip is not None and grad_norm > spec.grad_clip:
                    grads = {k: g * np.float32(spec.grad_clip / grad_norm) for k, g in grads.items()}
                adam_t += 1
                _apply_update(model.params, grads, moments, spec.optimizer, lr, adam_t)
            hf_since_log += 1
            if spec.hf_nan_filter and not math.isfinite(loss):
                hf_running += hf_running / hf_since_log  # Trainer: tr_loss += tr_loss / (1 + steps since log)
            else:
                hf_running += loss
            if step % spec.log_every == 0:
                logged_loss = hf_running / hf_since_log if spec.hf_nan_filter else loss
                record = LogRecord(step, {"train/loss": logged_loss, "train/lr": lr, "train/grad_norm": grad_norm})
                if spec.log_train_accuracy and spec.task == "classify":
                    record.values["train/accuracy"] = float(np.mean(out.argmax(axis=1) == y))
                if spec.fp16:
                    record.values["train/loss_scale"] = loss_scale
                    record.values["train/skipped_steps"] = float(skipped_total)
                hf_running, hf_since_log = 0.0, 0
                yield record
            if step % spec.eval_every == 0:
                evaluated = model.evaluate(x_eval, y_eval)
                if step in spec.eval_nan_at:
                    evaluated = {k: math.nan for k in evaluated}
                yield LogRecord(step, evaluated, is_eval=True)


def _apply_update(
    params: dict[str, np.ndarray],
    grads: dict[str, np.ndarray],
    moments: dict[str, tuple[np.ndarray, np.ndarray]],
    optimizer: str,
    lr: float,
    t: int,
) -> None:
    for k in params:
        first, second = moments[k]
        grad = grads[k].astype(np.float64)
        if optimizer == "adam":
            first *= 0.9
            first += 0.1 * grad
            second *= 0.999
            second += 0.001 * grad**2
            corrected = math.sqrt(1 - 0.999**t) / (1 - 0.9**t)
            params[k] -= (lr * corrected * first / (np.sqrt(second) + 1e-8)).astype(np.float32)
        else:
            first *= 0.9
            first += grad
            params[k] -= (lr * first).astype(np.float32)
