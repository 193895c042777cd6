"""Write the corpus logs that come from real trainers (not from format strings): run this file with the project's
venv (transformers, lightning, torch CPU) and it rewrites the files below from what the trainers printed.

  hf_trainer_tqdm_crash.log   a real HF Trainer (tiny GPT-2 built from a config) with its tqdm bar on stderr,
                              stdout and stderr together as a terminal shows them; the model raises
                              torch.OutOfMemoryError at step CRASH_STEP, so the traceback starts on the bar's
                              line and a last bar redraw follows the exception
  lightning_real_healthy.log  a real Lightning Trainer's stdout (model summary, tqdm progress bar with the loss,
                              3 epochs of 40 batches)
  lightning_rich_healthy.log  the same with Lightning's default bar when `rich` is installed (not on a terminal,
                              rich prints only the bar's last frame)

    python tests/data/trainer_logs/make_real_logs.py            # both
    python tests/data/trainer_logs/make_real_logs.py --child hf /tmp/out.json   # one run (used by the above)

Each run records, from inside the trainer, the (global step, key, value) of every value it logged (HF's `on_log`,
Lightning's logged metrics after each batch): the expected triples, never the parser's output.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
CRASH_STEP = 37
HF_STEPS = 60
LIGHTNING_EPOCHS, LIGHTNING_BATCHES = 3, 40


def hf_run(record: Path) -> None:
    import torch
    from torch.utils.data import Dataset
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

    torch.manual_seed(0)
    triples: list[list[object]] = []

    class Tokens(Dataset):  # type: ignore[type-arg]
        def __len__(self) -> int:
            return 4 * HF_STEPS

        def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
            ids = torch.tensor([(i * 7 + j) % 50 for j in range(16)])
            return {"input_ids": ids, "labels": ids}

    class Record(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):  # type: ignore[no-untyped-def]
            for key, value in (logs or {}).items():  # as ProgressCallback prints them: floats with 4 digits
                if key != "epoch" and isinstance(value, (int, float)):
                    triples.append([state.global_step, key, float(f"{value:.4g}") if isinstance(value, float) else value])
            record.write_text(json.dumps(triples))

    class Crashing(GPT2LMHeadModel):
        calls = 0

        def forward(self, input_ids=None, labels=None, **kwargs):  # type: ignore[no-untyped-def]
            Crashing.calls += 1
            if Crashing.calls > CRASH_STEP:
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
                                             "capacity of 79.15 GiB of which 1.06 GiB is free.")
            return super().forward(input_ids=input_ids, labels=labels, **kwargs)

    model = Crashing(GPT2Config(vocab_size=50, n_positions=16, n_embd=32, n_layer=2, n_head=2, bos_token_id=0,
                                eos_token_id=0))
    args = TrainingArguments(output_dir=str(record.parent / "hf-out"), per_device_train_batch_size=4,
                             max_steps=HF_STEPS, logging_steps=5, report_to=[], save_strategy="no",
                             use_cpu=True, disable_tqdm=False, learning_rate=5e-3)
    Trainer(model=model, args=args, train_dataset=Tokens(), callbacks=[Record()]).train()


def lightning_run(record: Path, bar: str) -> None:
    """`bar`: "tqdm" (TQDMProgressBar, what Lightning uses without `rich`) or "rich" (its default with `rich`)."""
    import lightning as L
    import torch
    from lightning.pytorch.callbacks import TQDMProgressBar
    from torch.utils.data import DataLoader, TensorDataset
    from tqdm import tqdm

    torch.manual_seed(0)
    triples: list[list[object]] = []

    class Tiny(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(8, 1)

        def training_step(self, batch, index):  # type: ignore[no-untyped-def]
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.layer(x), y)
            self.log("train_loss", loss, prog_bar=True)
            return loss

        def on_train_batch_end(self, outputs, batch, index):  # type: ignore[no-untyped-def]
            # the bar shows the value logged at this batch; the step the bar counts is the batch's own
            value = float(outputs["loss"])  # as each bar prints it: tqdm's format_num, rich's 3 decimals
            shown = tqdm.format_num(value) if bar == "tqdm" else f"{value:.3f}"
            triples.append([self.trainer.global_step, "train_loss", float(shown)])
            record.write_text(json.dumps(triples))

        def configure_optimizers(self):  # type: ignore[no-untyped-def]
            return torch.optim.SGD(self.parameters(), lr=0.05)

    x = torch.randn(4 * LIGHTNING_BATCHES, 8)
    y = x.sum(dim=1, keepdim=True)
    callbacks = [TQDMProgressBar(refresh_rate=1)] if bar == "tqdm" else []
    trainer = L.Trainer(max_epochs=LIGHTNING_EPOCHS, accelerator="cpu", logger=False, enable_checkpointing=False,
                        log_every_n_steps=5, default_root_dir=str(record.parent), callbacks=callbacks)
    trainer.fit(Tiny(), DataLoader(TensorDataset(x, y), batch_size=4))


def _capture(kind: str, log: Path, tmp: Path) -> list[list[object]]:
    record = tmp / f"{kind}.json"
    env = {**os.environ, "COLUMNS": "120", "TQDM_MININTERVAL": "0", "PYTHONUNBUFFERED": "1",
           "TRANSFORMERS_VERBOSITY": "warning", "TOKENIZERS_PARALLELISM": "false"}
    with open(log, "wb") as out:  # stdout and stderr in one file, in the order written: what a terminal shows
        subprocess.run([sys.executable, __file__, "--child", kind, str(record)], stdout=out, stderr=subprocess.STDOUT,
                       env=env, timeout=600, cwd=tmp, check=False)
    return json.loads(record.read_text()) if record.is_file() else []


def _write_expected(log: Path, fmt: str, case: str, decision: str, crash: str | None,
                    triples: list[list[object]]) -> None:
    body = ",\n".join(json.dumps([s, k, "nan" if isinstance(v, float) and math.isnan(v) else v])
                      for s, k, v in triples)
    head = json.dumps({"format": fmt, "case": case, "decision": decision, "crash": crash, "real": True})[:-1]
    log.with_suffix(".expected.json").write_text(f'{head}, "triples": [\n{body}\n]}}\n', encoding="utf-8")


def main() -> None:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="real-logs-") as name:
        tmp = Path(name)
        log = HERE / "hf_trainer_tqdm_crash.log"
        triples = _capture("hf", log, tmp)
        _write_expected(log, "hf_trainer", "crash", "STOP", "OutOfMemoryError", triples)
        log = HERE / "lightning_real_healthy.log"
        triples = _capture("lightning_tqdm", log, tmp)
        _write_expected(log, "lightning", "healthy", "not STOP", None, triples)
        log = HERE / "lightning_rich_healthy.log"
        triples = _capture("lightning_rich", log, tmp)  # not on a terminal, rich prints the bar's last frame only
        _write_expected(log, "lightning", "healthy", "not STOP", None, triples[-1:])


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        kind, out = sys.argv[2], Path(sys.argv[3])
        hf_run(out) if kind == "hf" else lightning_run(out, kind.split("_")[1])
    else:
        main()
