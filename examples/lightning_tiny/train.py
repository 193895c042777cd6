"""A tiny real Lightning run: a LightningModule regressing a synthetic tanh target, Trainer(default_root_dir=...)
with Lightning's own layout: TensorBoardLogger writes `default_root_dir/lightning_logs/version_N/`, CSVLogger
`save_dir/name/version_N/metrics.csv`, a new N per run. Which logger is the config's `logger` key.

    python train.py --config configs/synthetic-tanh-lightning-csv.yaml                 # healthy, CSVLogger only
    python train.py --config configs/synthetic-tanh-lightning-tb.yaml --nan-at 60      # the loss is NaN from step 60
    python train.py --config configs/synthetic-tanh-lightning-tb.yaml --diverge-at 60  # the learning rate x300 from step 60
    python train.py --config configs/synthetic-tanh-lightning-tb.yaml --precision bf16 # bf16-mixed (GPU or CPU)
"""

from __future__ import annotations

import argparse
import sys
import time

import yaml


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="YAML config; the flags below override it")
    parser.add_argument("--max-steps", type=int)
    parser.add_argument("--step-seconds", type=float, help="pace of the run (a sleep after each batch)")
    parser.add_argument("--nan-at", type=int, help="a corrupted batch: the loss is NaN from this step on")
    parser.add_argument("--diverge-at", type=int, help="multiply the learning rate by 300 from this step")
    parser.add_argument("--precision", choices=("fp32", "fp16", "bf16"), help="mixed precision (fp16 needs a GPU)")
    args = parser.parse_args(argv)
    with open(args.config, encoding="utf-8") as handle:
        config = yaml.safe_load(handle) or {}
    for key in ("max_steps", "step_seconds", "nan_at", "diverge_at", "precision"):
        if getattr(args, key) is not None:
            config[key] = getattr(args, key)

    import lightning as L
    import torch
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

    L.seed_everything(int(config.get("seed", 0)), verbose=False)
    nan_at, diverge_at = config.get("nan_at"), config.get("diverge_at")
    step_seconds = float(config.get("step_seconds", 0.0))
    features = 16
    true_w = torch.randn(features, 1)

    def batches(count: int) -> torch.utils.data.TensorDataset:
        x = torch.randn(count, features)
        return torch.utils.data.TensorDataset(x, torch.tanh(x @ true_w) + 0.05 * torch.randn(count, 1))

    class Regressor(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(features, int(config.get("hidden", 32))), torch.nn.Tanh(),
                                           torch.nn.Linear(int(config.get("hidden", 32)), 1))

        def training_step(self, batch, batch_idx):  # type: ignore[no-untyped-def]
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            if nan_at is not None and self.global_step >= int(nan_at):
                loss = loss * float("nan")
            self.log("train_loss", loss, prog_bar=True)
            return loss

        def on_train_batch_start(self, batch, batch_idx):  # type: ignore[no-untyped-def]
            if diverge_at is not None and self.global_step == int(diverge_at):
                for group in self.optimizers().param_groups:  # type: ignore[union-attr]
                    group["lr"] *= 300

        def on_train_batch_end(self, outputs, batch, batch_idx):  # type: ignore[no-untyped-def]
            if step_seconds:
                time.sleep(step_seconds)

        def validation_step(self, batch, batch_idx):  # type: ignore[no-untyped-def]
            x, y = batch
            self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y), prog_bar=True)

        def configure_optimizers(self):  # type: ignore[no-untyped-def]
            return torch.optim.SGD(self.parameters(), lr=float(config.get("lr", 0.05)),
                                   momentum=float(config.get("momentum", 0.9)))

    root = config.get("default_root_dir", ".")
    logger: object
    if config.get("logger", "tensorboard") == "csv":
        logger = CSVLogger(save_dir=root, flush_logs_every_n_steps=int(config.get("flush_logs_every_n_steps", 100)))
    else:
        logger = TensorBoardLogger(save_dir=root)  # what Trainer(default_root_dir=...) makes by default
    batch_size = int(config.get("batch_size", 64))
    trainer = L.Trainer(
        default_root_dir=root, logger=logger, max_steps=int(config.get("max_steps", 600)),
        accelerator="gpu" if torch.cuda.is_available() else "cpu",  # the GPU when there is one, as a user's run would
        precision={"fp16": "16-mixed", "bf16": "bf16-mixed"}.get(str(config.get("precision")), "32-true"),
        devices=1, log_every_n_steps=int(config.get("log_every_n_steps", 10)),
        val_check_interval=int(config.get("val_check_interval", 50)), enable_checkpointing=False,
    )
    train = torch.utils.data.DataLoader(batches(4096), batch_size=batch_size, shuffle=True)
    val = torch.utils.data.DataLoader(batches(512), batch_size=batch_size)
    trainer.fit(Regressor(), train, val)
    print(f"training finished after {trainer.global_step} steps", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
