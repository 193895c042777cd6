"""A small real training run: a numpy MLP regressor trained with SGD + momentum and a
warm-up/cosine learning-rate schedule. It logs to TensorBoard (tensorboard's own event writer)
and prints Hugging-Face-style dict lines to stdout.

    python train.py --config configs/synthetic-tanh-mlp.yaml                  # healthy
    python train.py --config configs/synthetic-tanh-mlp.yaml --diverge-at 120  # LR x300 from step 120
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np


def make_writer(logdir: str, flush_secs: float):
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    writer = EventFileWriter(logdir, flush_secs=flush_secs)

    def log_scalars(step: int, values: dict[str, float]) -> None:
        summary = Summary(value=[Summary.Value(tag=k, simple_value=float(v)) for k, v in values.items()])
        writer.add_event(Event(wall_time=time.time(), step=step, summary=summary))

    return writer, log_scalars


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", help="YAML config; flags below override it")
    parser.add_argument("--logdir")
    parser.add_argument("--steps", type=int, help="total steps (default: epochs x steps_per_epoch)")
    parser.add_argument("--lr", type=float)
    parser.add_argument("--batch-size", type=int)
    parser.add_argument("--step-seconds", type=float, help="pace of the run (sleep per step)")
    parser.add_argument("--diverge-at", type=int, default=None, help="multiply the LR by 300 from this step")
    parser.add_argument("--nan-at", type=int, default=None, help="a corrupted batch: weights become NaN at this step")
    parser.add_argument("--drift-at", type=int, default=None,
                        help="from this step the weights drift away (loss climbs, finite): a slow divergence")
    parser.add_argument("--overfit-at", type=int, default=None,
                        help="from this step the eval set drifts from the training set: eval loss regresses")
    parser.add_argument("--flush-secs", type=float, default=5.0)
    parser.add_argument("--seed", type=int)
    parser.add_argument("--wandb", action="store_true", help="also log to W&B (WANDB_PROJECT, WANDB_MODE=offline, ...)")
    args = parser.parse_args(argv)
    config = {"lr": 0.05, "batch_size": 64, "seed": 0, "epochs": 3, "steps_per_epoch": 200, "step_seconds": 0.05,
              "logdir": "runs/synthetic-tanh-mlp-bs64-lr5e-2"}
    if args.config:
        import yaml

        with open(args.config, encoding="utf-8") as handle:
            config.update(yaml.safe_load(handle) or {})
    for key in ("logdir", "lr", "batch_size", "step_seconds", "seed"):
        if getattr(args, key) is not None:
            config[key] = getattr(args, key)
    args.logdir, args.lr, args.batch_size = config["logdir"], float(config["lr"]), int(config["batch_size"])
    args.step_seconds, args.seed = float(config["step_seconds"]), int(config["seed"])
    steps_per_epoch = int(config["steps_per_epoch"])
    args.steps = args.steps or int(config["epochs"]) * steps_per_epoch

    rng = np.random.default_rng(args.seed)
    n_features, hidden = 16, 32
    true_w = rng.normal(size=(n_features, 1))
    x_all = rng.normal(size=(4096, n_features))
    y_all = np.tanh(x_all @ true_w) + 0.05 * rng.normal(size=(4096, 1))
    x_train, y_train, x_eval, y_eval = x_all[:3584], y_all[:3584], x_all[3584:], y_all[3584:]
    params = {
        "w1": rng.normal(scale=1 / math.sqrt(n_features), size=(n_features, hidden)),
        "b1": np.zeros(hidden),
        "w2": rng.normal(scale=1 / math.sqrt(hidden), size=(hidden, 1)),
        "b2": np.zeros(1),
    }
    velocity = {k: np.zeros_like(v) for k, v in params.items()}
    writer, log_scalars = make_writer(args.logdir, args.flush_secs)
    run = None
    if args.wandb:
        from wandb_logging import start_run  # W&B only when asked for (it takes a few seconds to start)

        run = start_run({**config, "steps": args.steps})
    warmup = max(1, args.steps // 20)

    def forward(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        h = np.tanh(x @ params["w1"] + params["b1"])
        return h, h @ params["w2"] + params["b2"]

    np.seterr(all="ignore")  # a diverging run overflows: that is the point of the switch
    epoch_started = time.time()
    for step in range(1, args.steps + 1):
        lr = args.lr * min(1.0, step / warmup) * 0.5 * (1 + math.cos(math.pi * step / args.steps))
        if args.diverge_at is not None and step >= args.diverge_at:
            lr = args.lr * 300
        idx = rng.integers(0, len(x_train), size=args.batch_size)
        x, y = x_train[idx], y_train[idx]
        h, pred = forward(x)
        err = pred - y
        loss = float(np.mean(err**2))
        d_pred = 2 * err / len(x)
        grads = {"w2": h.T @ d_pred, "b2": d_pred.sum(0)}
        d_h = (d_pred @ params["w2"].T) * (1 - h**2)
        grads["w1"] = x.T @ d_h
        grads["b1"] = d_h.sum(0)
        grad_norm = float(math.sqrt(sum(float(np.sum(g**2)) for g in grads.values())))
        for k in params:
            velocity[k] = 0.9 * velocity[k] + grads[k]
            params[k] -= lr * velocity[k]
        if args.nan_at is not None and step == args.nan_at:
            params["w2"] = params["w2"] * np.nan
        if args.drift_at is not None and step >= args.drift_at:
            params["w2"] = params["w2"] + 0.02 * np.sign(params["w2"])
        metrics = {"train/loss": loss, "train/lr": lr, "train/grad_norm": grad_norm}
        if step % 50 == 0:
            shift = 0.0 if args.overfit_at is None else max(0, step - args.overfit_at) / 400
            metrics["eval/loss"] = float(np.mean((forward(x_eval)[1] - y_eval - shift) ** 2))
        log_scalars(step, metrics)
        if run is not None:
            run.log(metrics, step=step)
        if step % 10 == 0 or "eval/loss" in metrics:
            shown = {"loss": round(loss, 6), "grad_norm": grad_norm, "learning_rate": lr, "step": step}
            if "eval/loss" in metrics:
                shown["eval_loss"] = metrics["eval/loss"]
            print(shown, flush=True)
        time.sleep(args.step_seconds)
        if step % steps_per_epoch == 0:
            print(f"epoch {step // steps_per_epoch} done, epoch_time {time.time() - epoch_started:.1f}s", flush=True)
            epoch_started = time.time()
    writer.close()
    if run is not None:
        run.finish()
    print(f"training finished after {args.steps} steps", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
