"""A tiny CPU model trained with DistributedDataParallel on the gloo backend, preemption-safe.

Run it under torchrun (any number of processes) or as one plain process. On SIGUSR1 (sent by the job
script before the time limit) every rank agrees at the next step, rank 0 saves a checkpoint, and all exit
0; started again, the run resumes from that checkpoint. Rank 0 writes TensorBoard scalars (loss, lr) and
prints Hugging-Face-style dict lines.

    guarded-sbatch --ntasks 1 --cpus-per-task 1 --mem 2G --time 00:10:00 --job-name synthetic-regression-linear-ddp-bs128 \\
        torchrun --nproc-per-node 2 train.py --config configs/synthetic-regression-linear-ddp.yaml
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
import time
from pathlib import Path


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", help="YAML config; the flags below override it")
    parser.add_argument("--steps", type=int, help="total steps (default: epochs x steps_per_epoch)")
    parser.add_argument("--step-seconds", type=float, help="pace of the run (sleep per step)")
    parser.add_argument("--logdir")
    parser.add_argument("--checkpoint-dir")
    parser.add_argument("--nan-at", type=int, help="a corrupted batch: every rank's weights become NaN at this step")
    args = parser.parse_args(argv)
    config = {"lr": 0.05, "per_device_train_batch_size": 64, "seed": 0, "epochs": 2, "steps_per_epoch": 100,
              "step_seconds": 0.05, "features": 16, "momentum": 0.9,
              "logdir": "runs/synthetic-regression-linear-ddp", "checkpoint_dir": "checkpoints/synthetic-regression-linear-ddp"}
    if args.config:
        import yaml

        with open(args.config, encoding="utf-8") as handle:
            config.update(yaml.safe_load(handle) or {})
    for key in ("step_seconds", "logdir", "checkpoint_dir"):
        if getattr(args, key) is not None:
            config[key] = getattr(args, key)
    config["steps"] = args.steps or int(config["epochs"]) * int(config["steps_per_epoch"])
    config["nan_at"] = args.nan_at
    return argparse.Namespace(**config)


def main(argv: list[str] | None = None) -> int:
    stop_requested = False

    def on_usr1(signum: int, frame: object) -> None:
        nonlocal stop_requested
        stop_requested = True

    signal.signal(signal.SIGUSR1, on_usr1)  # before importing torch: a signal during start-up is kept too
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    args = parse_args(argv)
    distributed = "WORLD_SIZE" in os.environ and int(os.environ["WORLD_SIZE"]) > 1
    if distributed:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if distributed else 0
    world = dist.get_world_size() if distributed else 1
    torch.manual_seed(args.seed)
    model = torch.nn.Sequential(torch.nn.Linear(args.features, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    checkpoint = Path(args.checkpoint_dir) / "checkpoint.pt"
    start_step = 1
    if checkpoint.is_file():
        state = torch.load(checkpoint, weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start_step = int(state["step"]) + 1
        if rank == 0:
            print(f"resumed from step {state['step']} ({checkpoint})", flush=True)
    ddp = DistributedDataParallel(model) if distributed else model
    true_weights = torch.randn(args.features, 1, generator=torch.Generator().manual_seed(1234))
    data = torch.Generator().manual_seed(args.seed * 1000 + rank)
    writer = None
    if rank == 0:
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(args.logdir, flush_secs=2)
    epoch_started = time.monotonic()
    for step in range(start_step, args.steps + 1):
        if _agree(stop_requested, distributed):
            _save(checkpoint, model, optimizer, step - 1, rank, distributed)
            if rank == 0:
                print(f"checkpointed at step {step - 1} on SIGUSR1; exiting to be requeued", flush=True)
            return _finish(writer, distributed, 0)
        lr = args.lr * 0.5 * (1 + math.cos(math.pi * (step - 1) / args.steps))
        for group in optimizer.param_groups:
            group["lr"] = lr
        if step == args.nan_at:
            with torch.no_grad():
                for parameter in model.parameters():
                    parameter.mul_(math.nan)
            if rank == 0:
                print(f"nan injected at step {step} (unix time {time.time():.3f})", flush=True)
        inputs = torch.randn(args.per_device_train_batch_size, args.features, generator=data)
        targets = inputs @ true_weights + 0.1 * torch.randn(args.per_device_train_batch_size, 1, generator=data)
        loss = torch.nn.functional.mse_loss(ddp(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if distributed:
            dist.all_reduce(loss.detach(), op=dist.ReduceOp.AVG)
        if rank == 0 and writer is not None:
            writer.add_scalar("train/loss", loss.item(), step)
            writer.add_scalar("train/learning_rate", lr, step)
            if step % 10 == 0:
                print({"loss": round(loss.item(), 6), "learning_rate": lr, "step": step, "world_size": world}, flush=True)
        time.sleep(args.step_seconds)
        if rank == 0 and step % args.steps_per_epoch == 0:
            print(f"epoch {step // args.steps_per_epoch} done, epoch_time {time.monotonic() - epoch_started:.1f}s", flush=True)
            epoch_started = time.monotonic()
    _save(checkpoint, model, optimizer, args.steps, rank, distributed)
    if rank == 0:
        print(f"training finished after {args.steps} steps", flush=True)
    return _finish(writer, distributed, 0)


def _agree(flag: bool, distributed: bool) -> bool:
    """Every rank stops at the same step (a rank that stops alone would leave the others in all_reduce)."""
    if not distributed:
        return flag
    import torch
    import torch.distributed as dist

    vote = torch.tensor([1 if flag else 0])
    dist.all_reduce(vote, op=dist.ReduceOp.MAX)
    return bool(vote.item())


def _save(path: Path, model: object, optimizer: object, step: int, rank: int, distributed: bool) -> None:
    import torch

    if rank == 0:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, partial)  # type: ignore[attr-defined]
        os.replace(partial, path)  # a checkpoint is whole or absent, never half written
    if distributed:
        import torch.distributed as dist

        dist.barrier()


def _finish(writer: object | None, distributed: bool, code: int) -> int:
    if writer is not None:
        writer.close()  # type: ignore[attr-defined]
    if distributed:
        import torch.distributed as dist

        dist.destroy_process_group()
    return code


if __name__ == "__main__":
    sys.exit(main())
