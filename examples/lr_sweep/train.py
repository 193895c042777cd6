"""One task of a learning-rate sweep: a plain PyTorch loop logging with `SummaryWriter(logdir)`.

    python train.py --config configs/synthetic-tanh-torch-sweep.yaml --lr 0.02 --logdir runs/sweep-lr0.02
    ... --nan-task 2 --nan-at 30     # in array task 2 only (SLURM_ARRAY_TASK_ID), the loss is NaN from step 30
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import yaml


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="YAML config; the flags below override it")
    parser.add_argument("--lr", type=float)
    parser.add_argument("--logdir", required=True, help="the TensorBoard folder of this task")
    parser.add_argument("--steps", type=int)
    parser.add_argument("--step-seconds", type=float, help="pace of the run (a sleep after each step)")
    parser.add_argument("--nan-task", type=int, help="the array task whose loss turns NaN (--nan-at)")
    parser.add_argument("--nan-at", type=int, help="a corrupted batch: the loss is NaN from this step on")
    args = parser.parse_args(argv)
    with open(args.config, encoding="utf-8") as handle:
        config = yaml.safe_load(handle) or {}
    for key in ("lr", "steps", "step_seconds"):
        if getattr(args, key) is not None:
            config[key] = getattr(args, key)
    task = os.environ.get("SLURM_ARRAY_TASK_ID")
    nan_at = args.nan_at if args.nan_task is None or (task is not None and int(task) == args.nan_task) else None

    import torch
    from torch.utils.tensorboard import SummaryWriter

    torch.manual_seed(int(config.get("seed", 0)))
    features, hidden = 16, int(config.get("hidden", 32))
    true_w = torch.randn(features, 1)
    x_all = torch.randn(4096, features)
    y_all = torch.tanh(x_all @ true_w) + 0.05 * torch.randn(4096, 1)
    model = torch.nn.Sequential(torch.nn.Linear(features, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=float(config["lr"]), momentum=float(config.get("momentum", 0.9)))
    steps, batch_size = int(config.get("steps", 600)), int(config.get("batch_size", 64))
    step_seconds = float(config.get("step_seconds", 0.0))
    writer = SummaryWriter(args.logdir)
    print(f"task {task}: lr {config['lr']}, logging to {args.logdir}", flush=True)
    for step in range(1, steps + 1):
        index = torch.randint(0, 4096, (batch_size,))
        loss = torch.nn.functional.mse_loss(model(x_all[index]), y_all[index])
        if nan_at is not None and step >= nan_at:
            loss = loss * float("nan")
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        for tag, value in (("Loss/train", loss.item()), ("learning_rate", optimizer.param_groups[0]["lr"])):
            writer.add_scalar(tag, value, step)
        if not step % 10:  # what the job's log shows, and the events on disk up to here
            writer.flush()
            print(f"step {step} loss {loss.item():.6f} lr {config['lr']} (array task {task})", flush=True)
        time.sleep(step_seconds)
    writer.close()
    print(f"task {task}: {steps} steps done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
