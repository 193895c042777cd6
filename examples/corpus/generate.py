"""The labelled corpus: real small training runs (see corpus_train.py), each written to TensorBoard,
a text log in a real trainer's format, and optionally a W&B offline run, with the decision expected
of the judge.

    python examples/corpus/generate.py OUT_DIR [--wandb] [--only NAME ...]

Labels: a healthy run must never be stopped; a broken run must be stopped no earlier than the
labelled onset of its fault and no later than `stop_within_steps` after it, for one of `reasons`.
The onset is taken from what really happened in the run (e.g. the first non-finite loss, the step
of the best evaluation), not from a guess.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Literal

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpus_sinks import TensorBoardSink, TextFormat, TextLogSink, WandbSink
from corpus_train import LogRecord, TrainSpec, train

Onset = Literal["none", "start", "fault", "first_nonfinite_loss", "best_eval", "first_eval", "scale_floor"]


@dataclass(frozen=True)
class CorpusSpec:
    description: str
    train: TrainSpec
    text_format: TextFormat
    healthy: bool
    onset: Onset = "none"
    stop_within_steps: int | None = None
    reasons: tuple[str, ...] = ()
    should_wait_first: bool = False  # a `should` case: some poll says WAIT before the first STOP
    wait_expected_at: tuple[int, int] | None = None  # a healthy run some poll in [a, b] must call WAIT
    epoch_steps: int | None = None  # logged per epoch: step = epoch, train metrics averaged over it


@dataclass(frozen=True)
class RunLabels:
    name: str
    description: str
    healthy: bool  # never STOP
    onset_step: int | None  # the fault began here: no STOP before it
    stop_within_steps: int | None  # STOP by onset_step + this
    reasons: tuple[str, ...]  # acceptable Reason values of that STOP
    should_wait_first: bool  # a WAIT at some poll before the first STOP
    wait_expected_at: tuple[int, int] | None  # healthy, but some poll in this step range says WAIT
    last_step: int
    tensorboard_dir: str
    text_log: str
    text_format: str
    wandb_dir: str | None
    seconds: float

    def to_json(self) -> dict[str, object]:
        return asdict(self)


NAN_REASONS = ("non_finite_loss", "hidden_nan", "non_finite_metric", "divergence", "loss_spike", "grad_explosion")
DIVERGE_REASONS = ("divergence", "loss_spike", "grad_explosion")

CORPUS: dict[str, CorpusSpec] = {
    "healthy": CorpusSpec(
        "Adam, warm-up + cosine decay, flattens at the end", TrainSpec(steps=1500), "megatron", healthy=True
    ),
    "noisy": CorpusSpec(
        "batch of 4, 30% label noise, the loss of every single batch logged",
        TrainSpec(steps=1200, batch_size=4, label_noise=0.3, log_every=1, lr=1e-3), "nanogpt", healthy=True,
    ),
    "warmup_spike": CorpusSpec(
        "corrupted (x30) input batches at steps 60-66 of the warm-up: a loss spike that recovers",
        TrainSpec(steps=1000, log_every=2, bad_inputs=(60, 66, 30.0), warmup_steps=100), "llmc", healthy=True,
    ),
    "fp16_overflow": CorpusSpec(
        "fp16 with dynamic loss scaling: overflows, skipped steps and scale drops, all normal",
        TrainSpec(steps=1200, fp16=True, log_every=1, fp16_growth_interval=40), "megatron", healthy=True,
    ),
    "scale_large": CorpusSpec(
        "regression with targets x100: loss ~1e4, healthy",
        TrainSpec(task="regress", steps=1200, target_scale=100.0, lr=1e-2), "llmc", healthy=True,
    ),
    "scale_small": CorpusSpec(
        "regression with targets x0.03: loss ~1e-3, healthy",
        TrainSpec(task="regress", steps=1200, target_scale=0.03, lr=1e-3), "hf", healthy=True,
    ),
    "nan_lr": CorpusSpec(
        "SGD regression; an LR bug multiplies the LR by 300 at step 600: the loss explodes to NaN",
        TrainSpec(task="regress", optimizer="sgd", lr=0.02, steps=1000, lr_multiplier_from=(600, 300.0)),
        "megatron", healthy=False, onset="fault", stop_within_steps=80, reasons=NAN_REASONS,
    ),
    "hidden_nan": CorpusSpec(
        "like nan_lr, logged through HF's NaN filter: loss 0.0 beside grad_norm nan",
        TrainSpec(task="regress", optimizer="sgd", lr=0.02, steps=1000, lr_multiplier_from=(600, 300.0),
                  hf_nan_filter=True, log_every=10),
        "hf", healthy=False, onset="fault", stop_within_steps=120, reasons=NAN_REASONS,
    ),
    "diverge": CorpusSpec(
        "gradient clipping at 1.0, LR x100 from step 700: the loss climbs and stays high, never NaN",
        TrainSpec(steps=1400, optimizer="sgd", lr=0.05, grad_clip=1.0, lr_multiplier_from=(700, 100.0)),
        "llmc", healthy=False, onset="fault", stop_within_steps=150, reasons=DIVERGE_REASONS,
    ),
    "spike_no_recover": CorpusSpec(
        "unnormalised (x1000) input batches at steps 700-702 kill the ReLUs: the loss jumps to chance and stays",
        TrainSpec(steps=1400, optimizer="sgd", lr=0.05, bad_inputs=(700, 702, 1000.0)),
        "megatron", healthy=False, onset="fault", stop_within_steps=150, reasons=DIVERGE_REASONS,
        should_wait_first=True,
    ),
    "plateau_dead_relu": CorpusSpec(
        "every ReLU dead from the initialisation (bias -20): flat at chance from step 0",
        TrainSpec(steps=1200, init_bias=-20.0), "nanogpt", healthy=False, onset="start",
        stop_within_steps=600, reasons=("plateau_from_start",), should_wait_first=True,
    ),
    "zero_lr": CorpusSpec(
        "a schedule bug: the LR is 0 at every step",
        TrainSpec(steps=1000, schedule="zero"), "llmc", healthy=False, onset="start",
        stop_within_steps=600, reasons=("lr_schedule", "plateau_from_start"),
    ),
    "overfit": CorpusSpec(
        "128 hidden units on 200 noisy training examples: train loss to ~0, eval loss regresses",
        TrainSpec(steps=1000, n_train=200, hidden=128, label_noise=0.3, lr=1e-3, schedule="constant",
                  eval_every=25, n_features=30),
        "nanogpt", healthy=False, onset="best_eval", stop_within_steps=700, reasons=("eval_regressing",),
        should_wait_first=True,
    ),
    "eval_nan": CorpusSpec(
        "a corrupt row in the held-out file: every evaluation returns NaN, training is fine",
        TrainSpec(steps=1000, eval_every=50, eval_set_has_nan=True), "hf", healthy=False, onset="first_eval",
        stop_within_steps=150, reasons=("eval_failing",), should_wait_first=True,
    ),
    "fp16_scale_collapse": CorpusSpec(
        "fp16; the input pipeline stops normalising at step 600 (x1e4): every step overflows, the scale sits at 1",
        TrainSpec(steps=1000, fp16=True, log_every=5, bad_inputs=(600, 10_000, 1e4)), "megatron",
        healthy=False, onset="fault", stop_within_steps=200,
        reasons=("loss_scale_collapse", "non_finite_loss", "non_finite_metric"),
    ),
    # --- issue 14: what a sidecar meets at every poll ---
    "tiny_batch_sgd": CorpusSpec(
        "batch of 2, SGD + momentum, the loss of every single batch logged: very noisy, healthy",
        TrainSpec(steps=400, batch_size=2, optimizer="sgd", lr=0.01, log_every=1, eval_every=25,
                  label_noise=0.1, warmup_steps=20),
        "nanogpt", healthy=True,
    ),
    "tiny_batch_sgd_b": CorpusSpec(
        "batch of 2, SGD, another seed of data and a higher LR: very noisy, healthy",
        TrainSpec(steps=400, batch_size=2, optimizer="sgd", lr=0.03, log_every=1, eval_every=40,
                  label_noise=0.2, n_features=10, warmup_steps=20),
        "llmc", healthy=True,
    ),
    "no_validation": CorpusSpec(
        "no validation set: only the training loss and a training-batch accuracy are logged",
        TrainSpec(steps=800, eval_every=10**9, log_train_accuracy=True), "llmc", healthy=True,
    ),
    "nan_eval_once": CorpusSpec(
        "one evaluation (step 300) reads a corrupt shard and returns NaN, the next ones are fine",
        TrainSpec(steps=800, eval_every=50, eval_nan_at=(300,)), "megatron", healthy=True,
        wait_expected_at=(300, 349),
    ),
    "grad_spike": CorpusSpec(
        "gradient clipping; 4 rows of one batch (step 401) are x100: loss and grad norm jump once and recover",
        TrainSpec(steps=600, log_every=1, grad_clip=1.0, bad_inputs=(401, 401, 100.0), bad_rows=4),
        "llmc", healthy=True, wait_expected_at=(401, 420),
    ),
    "rare_evals_overfit": CorpusSpec(
        "like overfit, evaluated every 150 steps only",
        TrainSpec(steps=2400, n_train=200, hidden=128, label_noise=0.3, lr=1e-3, schedule="constant",
                  eval_every=150, n_features=30, log_every=10),
        "nanogpt", healthy=False, onset="best_eval", stop_within_steps=1000, reasons=("eval_regressing",),
        should_wait_first=True,
    ),
    "epoch_overfit": CorpusSpec(
        "like overfit, logged per epoch (step = epoch, DeiT JSON lines): the eval regresses for many epochs",
        TrainSpec(steps=1200, n_train=200, hidden=128, label_noise=0.3, lr=1e-3, schedule="constant",
                  eval_every=25, n_features=30, log_every=1),
        "deit", healthy=False, onset="best_eval", stop_within_steps=16, reasons=("eval_regressing",),
        should_wait_first=True, epoch_steps=25,
    ),
    "slow_climb": CorpusSpec(
        "the data pipeline serves a growing share of random labels from step 500: the loss climbs slowly",
        TrainSpec(steps=1500, lr=1e-3, schedule="constant", label_corruption_from=(500, 1 / 800), log_every=5,
                  eval_every=50),
        "megatron", healthy=False, onset="fault", stop_within_steps=700,
        reasons=("loss_climbing", "eval_regressing"), should_wait_first=True,
    ),
    "short_nan": CorpusSpec(
        "a short log: the LR bug hits at step 20 of 40, the loss is NaN from then on",
        TrainSpec(task="regress", optimizer="sgd", lr=0.02, steps=40, log_every=2, lr_multiplier_from=(20, 300.0),
                  eval_every=10**9, warmup_steps=4),
        "llmc", healthy=False, onset="fault", stop_within_steps=20, reasons=NAN_REASONS,
    ),
}


def _onset_step(spec: CorpusSpec, records: list[LogRecord]) -> int | None:
    kind = spec.onset
    if kind == "none":
        return None
    if kind == "start":
        return 0
    if kind == "fault":
        fault = spec.train.lr_multiplier_from or spec.train.bad_inputs or spec.train.label_corruption_from
        return int(fault[0]) // (spec.epoch_steps or 1) if fault else None
    if kind == "first_nonfinite_loss":
        return next(r.step for r in records if not r.is_eval and not math.isfinite(r.values["train/loss"]))
    if kind == "first_eval":
        return next(r.step for r in records if r.is_eval)
    if kind == "best_eval":
        evals = [r for r in records if r.is_eval]
        return min(evals, key=lambda r: r.values["eval/loss"]).step
    raise ValueError(f"unknown onset kind {kind}")


def generate_run(name: str, out_dir: str | Path, seed: int = 0, *, wandb: bool = False) -> RunLabels:
    """Train run `name` of CORPUS and write it under out_dir/name; return its labels."""
    spec = CORPUS[name]
    run_dir = Path(out_dir) / name
    if (run_dir / "labels.json").is_file():  # our own earlier output: start afresh, one event file
        shutil.rmtree(run_dir)
    (run_dir / "tb").mkdir(parents=True, exist_ok=True)
    text_log = run_dir / f"train-{spec.text_format}.log"
    file_sinks = [TensorBoardSink(run_dir / "tb"), TextLogSink(text_log, spec.text_format, spec.train.steps)]
    wandb_sink = WandbSink(run_dir, name) if wandb else None
    started = time.perf_counter()  # the run itself: training and writing, not imports nor wandb's start-up
    records = list(train(spec.train, seed=seed))
    if spec.epoch_steps:
        records = per_epoch(records, spec.epoch_steps)
    for record in records:
        for sink in file_sinks:
            sink.write(record)
    for sink in file_sinks:
        sink.close()
    seconds = time.perf_counter() - started
    if wandb_sink is not None:
        for record in records:
            wandb_sink.write(record)
        wandb_sink.close()
    labels = RunLabels(
        name=name,
        description=spec.description,
        healthy=spec.healthy,
        onset_step=_onset_step(spec, records),
        stop_within_steps=spec.stop_within_steps,
        reasons=spec.reasons,
        should_wait_first=spec.should_wait_first,
        wait_expected_at=spec.wait_expected_at,
        last_step=max(r.step for r in records),
        tensorboard_dir=str(run_dir / "tb"),
        text_log=str(text_log),
        text_format=spec.text_format,
        wandb_dir=str(run_dir / "wandb") if wandb else None,
        seconds=seconds,
    )
    (run_dir / "labels.json").write_text(json.dumps(labels.to_json(), indent=2))
    return labels


def records_of(name: str, seed: int = 0) -> list[LogRecord]:
    """The run's logged records without writing anything (for quick experiments)."""
    records = list(train(CORPUS[name].train, seed=seed))
    epoch_steps = CORPUS[name].epoch_steps
    return per_epoch(records, epoch_steps) if epoch_steps else records


def per_epoch(records: list[LogRecord], epoch_steps: int) -> list[LogRecord]:
    """What a per-epoch logger (Keras, DeiT) writes: step = epoch, the epoch's mean train loss and
    grad norm, its last LR, then the epoch-end evaluation."""
    out: list[LogRecord] = []
    bucket: list[LogRecord] = []
    for record in records:
        if not record.is_eval:
            bucket.append(record)
            continue
        epoch = record.step // epoch_steps
        if bucket:
            values = {k: float(sum(r.values[k] for r in bucket) / len(bucket)) for k in ("train/loss", "train/grad_norm")}
            values["train/lr"] = bucket[-1].values["train/lr"]
            out.append(LogRecord(epoch, values))
            bucket = []
        out.append(LogRecord(epoch, dict(record.values), is_eval=True))
    return out


def with_train(name: str, **changes: object) -> CorpusSpec:
    spec = CORPUS[name]
    return replace(spec, train=replace(spec.train, **changes))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Generate the labelled corpus of training runs.")
    parser.add_argument("out_dir")
    parser.add_argument("--only", nargs="*", default=None, help="names of runs (default: all)")
    parser.add_argument("--wandb", action="store_true", help="also write a W&B offline run (slow)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for name in args.only or list(CORPUS):
        labels = generate_run(name, args.out_dir, args.seed, wandb=args.wandb)
        print(f"{name:20s} {labels.seconds:5.2f}s last_step={labels.last_step} onset={labels.onset_step}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
