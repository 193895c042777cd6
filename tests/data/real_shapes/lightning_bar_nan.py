"""A tiny real Lightning run whose only record is its TQDM progress bar (no logger): `train/loss` on the bar, one
line redrawn with carriage returns. From step --nan-at the loss is NaN and each step then takes --slow-seconds (a run
that goes on, slowly, after its NaN: the bar's next redraw is long in coming). `nan_written_at` (beside the script)
gets the wall time at which the first NaN step ended."""

import argparse
import time
from pathlib import Path

import lightning as L
import torch

parser = argparse.ArgumentParser()
parser.add_argument("--nan-at", type=int, default=40)
parser.add_argument("--steps", type=int, default=60)
parser.add_argument("--slow-seconds", type=float, default=20.0)
args = parser.parse_args()
marker = Path(__file__).with_name("nan_written_at")
L.seed_everything(0, verbose=False)
x = torch.randn(4096, 8)
y = torch.tanh(x @ torch.randn(8, 1))


class Regressor(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(8, 1)

    def training_step(self, batch, batch_idx):  # type: ignore[no-untyped-def]
        loss = torch.nn.functional.mse_loss(self.net(batch[0]), batch[1])
        if self.global_step >= args.nan_at:
            loss = loss * float("nan")
        self.log("train/loss", loss, prog_bar=True)
        return loss

    def on_train_batch_end(self, outputs, batch, batch_idx):  # type: ignore[no-untyped-def]
        if self.global_step > args.nan_at:
            if not marker.exists():
                marker.write_text(f"{time.time()}\n")
            time.sleep(args.slow_seconds)
        else:
            time.sleep(0.1)

    def configure_optimizers(self):  # type: ignore[no-untyped-def]
        return torch.optim.SGD(self.parameters(), lr=0.05)


trainer = L.Trainer(max_steps=args.steps, logger=False, enable_checkpointing=False, enable_model_summary=False,
                    accelerator="cpu", callbacks=[L.pytorch.callbacks.TQDMProgressBar()])
trainer.fit(Regressor(), torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=32))
