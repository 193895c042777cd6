"""A tiny real Hugging Face Trainer run: GPT-2 built from a config (2 layers, 32 wide, no download) on a
synthetic next-token task, with the Trainer's own defaults for where things go: TensorBoard under
`output_dir/runs/<Mon><DD>_<HH-MM-SS>_<host>` (the default `logging_dir`), W&B offline in `wandb/`
beside the script when `report_to` names it, tqdm bars on stdout.

    python train.py --config configs/tiny-gpt2.yaml                 # healthy
    python train.py --config configs/tiny-gpt2.yaml --nan-at 40     # the loss becomes NaN from step 40
    python train.py --config configs/tiny-gpt2.yaml --diverge-at 60 # the learning rate x1000 from step 60
    python train.py --config configs/tiny-gpt2.yaml --precision fp16 # mixed precision (on a GPU when there is one)
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import yaml


def synthetic_dataset(size: int, seq_len: int, vocab: int, seed: int):  # type: ignore[no-untyped-def]
    """Sequences that count up modulo the vocabulary from a random start: learnable in a few hundred steps."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, vocab, (size, 1), generator=generator)
    ids = (starts + torch.arange(seq_len)) % vocab

    class Counting(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return size

        def __getitem__(self, index: int) -> dict:
            return {"input_ids": ids[index], "labels": ids[index]}

    return Counting()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="YAML config; the flags below override it")
    parser.add_argument("--max-steps", type=int)
    parser.add_argument("--step-seconds", type=float, help="pace of the run (a sleep after each step)")
    parser.add_argument("--nan-at", type=int, help="a corrupted batch: the loss is NaN from this step on")
    parser.add_argument("--diverge-at", type=int, help="multiply the learning rate by 1000 from this step")
    parser.add_argument("--precision", choices=("fp32", "fp16", "bf16"), help="mixed precision (fp16 needs a GPU)")
    args = parser.parse_args(argv)
    with open(args.config, encoding="utf-8") as handle:
        config = yaml.safe_load(handle) or {}
    for key in ("max_steps", "step_seconds", "nan_at", "diverge_at", "precision"):
        if getattr(args, key) is not None:
            config[key] = getattr(args, key)

    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

    torch.manual_seed(int(config.get("seed", 0)))
    vocab, seq_len = int(config.get("vocab_size", 64)), int(config.get("seq_len", 32))
    model = GPT2LMHeadModel(GPT2Config(vocab_size=vocab, n_positions=seq_len, n_embd=int(config.get("n_embd", 32)),
                                       n_layer=int(config.get("n_layer", 2)), n_head=int(config.get("n_head", 2))))
    nan_at, diverge_at = config.get("nan_at"), config.get("diverge_at")
    step_seconds = float(config.get("step_seconds", 0.0))

    class Faults(TrainerCallback):
        """The config's switches: pace, and a learning rate that jumps (the scheduler's base rates, so the
        Trainer's own schedule carries it)."""

        def on_step_begin(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
            scheduler = kwargs.get("lr_scheduler")
            if diverge_at is not None and state.global_step + 1 == int(diverge_at) and scheduler is not None:
                scheduler.base_lrs = [lr * 1000 for lr in scheduler.base_lrs]

        def on_step_end(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
            if step_seconds:
                time.sleep(step_seconds)

    class FaultyTrainer(Trainer):
        def compute_loss(self, model, inputs, return_outputs=False, **kwargs):  # type: ignore[no-untyped-def]
            result = super().compute_loss(model, inputs, return_outputs=return_outputs, **kwargs)
            if nan_at is not None and model.training and self.state.global_step + 1 >= int(nan_at):
                if return_outputs:
                    return result[0] * float("nan"), result[1]
                return result * float("nan")
            return result

    training_args = TrainingArguments(
        output_dir=config.get("output_dir", "outputs"),
        report_to=list(config.get("report_to", ["tensorboard", "wandb"])),
        run_name=config.get("run_name"),
        max_steps=int(config.get("max_steps", 300)),
        per_device_train_batch_size=int(config.get("batch_size", 16)),
        per_device_eval_batch_size=int(config.get("batch_size", 16)),
        learning_rate=float(config.get("lr", 1e-3)),
        warmup_steps=int(config.get("warmup_steps", 10)),
        weight_decay=float(config.get("weight_decay", 0.0)),
        max_grad_norm=float(config.get("max_grad_norm", 1.0)),
        logging_steps=int(config.get("logging_steps", 2)),
        eval_strategy="steps",
        eval_steps=int(config.get("eval_steps", 20)),
        save_strategy="no",
        seed=int(config.get("seed", 0)),
        dataloader_num_workers=int(config.get("num_workers", 0)),
        fp16=config.get("precision") == "fp16", bf16=config.get("precision") == "bf16",
        use_cpu=not torch.cuda.is_available(),  # the GPU when there is one, as a user's run would
    )
    trainer = FaultyTrainer(
        model=model, args=training_args, callbacks=[Faults()],
        train_dataset=synthetic_dataset(2048, seq_len, vocab, seed=1),
        eval_dataset=synthetic_dataset(128, seq_len, vocab, seed=2),
    )
    trainer.train()
    print(f"training finished after {trainer.state.global_step} steps", flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("WANDB_MODE", "offline")
    sys.exit(main())
