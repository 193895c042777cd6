"""A plain PyTorch loop logging with a bare `SummaryWriter()` (torch.utils.tensorboard, no logdir given): the
events go where torch puts them by default, `runs/<Mon><DD>_<HH-MM-SS>_<host>/`.

    python train.py --config configs/synthetic-tanh-torch.yaml                 # healthy
    python train.py --config configs/synthetic-tanh-torch.yaml --nan-at 60     # the loss is NaN from step 60
    python train.py --config configs/synthetic-tanh-torch.yaml --diverge-at 60 # the learning rate x300 from step 60
"""

from __future__ import annotations

import argparse
import sys
import time

import yaml


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="YAML config; the flags below override it")
    parser.add_argument("--steps", type=int)
    parser.add_argument("--step-seconds", type=float, help="pace of the run (a sleep after each step)")
    parser.add_argument("--nan-at", type=int, help="a corrupted batch: the loss is NaN from this step on")
    parser.add_argument("--diverge-at", type=int, help="multiply the learning rate by 300 from this step")
    args = parser.parse_args(argv)
    with open(args.config, encoding="utf-8") as handle:
        config = yaml.safe_load(handle) or {}
    for key in ("steps", "step_seconds", "nan_at", "diverge_at"):
        if getattr(args, key) is not None:
            config[key] = getattr(args, key)

    import torch
    from torch.utils.tensorboard import SummaryWriter

    torch.manual_seed(int(config.get("seed", 0)))
    features, hidden = 16, int(config.get("hidden", 32))
    true_w = torch.randn(features, 1)
    x_all = torch.randn(4096, features)
    y_all = torch.tanh(x_all @ true_w) + 0.05 * torch.randn(4096, 1)
    x_eval, y_eval = x_all[3584:], y_all[3584:]
    model = torch.nn.Sequential(torch.nn.Linear(features, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 1))
    lr = float(config.get("lr", 0.05))
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=float(config.get("momentum", 0.9)))
    steps, batch_size = int(config.get("steps", 600)), int(config.get("batch_size", 64))
    nan_at, diverge_at = config.get("nan_at"), config.get("diverge_at")
    step_seconds = float(config.get("step_seconds", 0.0))
    writer = SummaryWriter()  # runs/<date>_<host>
    for step in range(1, steps + 1):
        if diverge_at is not None and step == int(diverge_at):
            for group in optimizer.param_groups:
                group["lr"] *= 300
        index = torch.randint(0, 3584, (batch_size,))
        loss = torch.nn.functional.mse_loss(model(x_all[index]), y_all[index])
        if nan_at is not None and step >= int(nan_at):
            loss = loss * float("nan")
        optimizer.zero_grad()
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf"))
        optimizer.step()
        writer.add_scalar("Loss/train", loss.item(), step)
        writer.add_scalar("grad_norm", grad_norm.item(), step)
        writer.add_scalar("learning_rate", optimizer.param_groups[0]["lr"], step)
        if step % 50 == 0:
            with torch.no_grad():
                writer.add_scalar("Loss/eval", torch.nn.functional.mse_loss(model(x_eval), y_eval).item(), step)
        if step % 10 == 0:
            print(f"step {step} loss {loss.item():.6f}", flush=True)
        if step_seconds:
            time.sleep(step_seconds)
    writer.close()
    print(f"training finished after {steps} steps", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
