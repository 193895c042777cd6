"""A Hydra app swept on Slurm through the guard (docs/user-guide.md, "Sweeps"):

    python train.py -m hydra/launcher=guarded_submitit_slurm lr=0.01,0.1,100

Each job trains a small regression with SGD at its `lr` and logs its loss to TensorBoard in its own output folder
(`<sweep dir>/<job number>/tb`); lr=100 diverges, and its guard stops it.
"""

import time

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig


@hydra.main(version_base=None, config_path="conf", config_name="config")
def train(cfg: DictConfig) -> float:
    import torch
    from torch.utils.tensorboard import SummaryWriter

    torch.manual_seed(cfg.seed)
    x = torch.randn(1024, 8)
    y = x @ torch.randn(8, 1)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    writer = SummaryWriter(f"{HydraConfig.get().runtime.output_dir}/tb")
    loss = torch.tensor(0.0)
    for step in range(cfg.steps):
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        writer.add_scalar("train/loss", loss.item(), step)
        writer.flush()
        print(f"step {step} loss {loss.item():.4g}", flush=True)
        time.sleep(cfg.step_seconds)
    writer.close()
    return float(loss)


if __name__ == "__main__":
    train()
