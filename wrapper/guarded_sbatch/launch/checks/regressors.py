"""The silent regressors of the config-diff check, each judged from the intended config, the reference and the job shape."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from guarded_sbatch.sbatch.launcher import LauncherLine
from guarded_sbatch.launch.runconfig import RunConfig, as_number
from guarded_sbatch.sbatch.options import EffectiveOptions

PER_DEVICE_BATCH = ("per_device_train_batch_size", "per_gpu_train_batch_size", "train_micro_batch_size_per_gpu",
                    "micro_batch_size", "batch_size_per_device", "batch_size_per_gpu", "per_device_batch_size")
GLOBAL_BATCH = ("global_batch_size", "total_batch_size", "effective_batch_size", "global_train_batch_size")
PLAIN_BATCH = ("batch_size", "train_batch_size", "bs")
ACCUMULATION = ("gradient_accumulation_steps", "accumulate_grad_batches", "grad_accum", "grad_accum_steps",
                "accum_steps", "accumulation_steps", "gradient_accumulation")
LEARNING_RATE = ("lr", "learning_rate", "base_lr", "max_lr", "peak_lr")
BETAS = ("betas", "adam_beta1", "adam_beta2", "beta1", "beta2")
WEIGHT_DECAY = ("weight_decay", "wd")
WORKERS = ("num_workers", "dataloader_num_workers", "workers", "num_data_workers", "n_workers", "loader_workers")
SEED = ("seed", "random_seed", "manual_seed", "global_seed")
PRECISION = ("precision", "mixed_precision", "amp_dtype", "dtype", "torch_dtype", "bf16", "fp16", "amp", "half")
DATA_PATH = ("data_dir", "data_path", "data_root", "dataset_path", "dataset_dir", "train_data", "train_file",
             "data.path", "data.root", "dataset.root", "dataset.path", "root_dir", "train_dir")
WORLD_KEYS = ("world_size", "num_gpus", "n_gpus", "gpus", "devices", "num_processes")
NODE_KEYS = ("num_nodes", "nnodes", "nodes", "num_machines")


@dataclass(frozen=True)
class BatchShape:
    per_device: float | None
    accumulation: float
    world_size: int
    global_batch: float | None
    explanation: str
    ambiguous: bool = False  # a plain `batch_size` read as per device under DDP


def precision_of(config: RunConfig, launcher: LauncherLine | None = None) -> tuple[str, str] | None:
    """('bf16' | 'fp16' | 'fp32', the key it came from)."""
    if launcher is not None:
        value = launcher.option("mixed_precision")
        if value:
            normalized = _normalize_precision("mixed_precision", value)
            if normalized:
                return normalized, "accelerate --mixed_precision"
    for alias in PRECISION:
        found = config.find((alias,))
        if found is None:
            continue
        normalized = _normalize_precision(found[0].rsplit(".", 1)[-1], found[1])
        if normalized:
            return normalized, found[0]
    return None


def _normalize_precision(key: str, value: Any) -> str | None:
    key = key.lower()
    if isinstance(value, bool):
        if not value:
            return None
        return {"bf16": "bf16", "fp16": "fp16", "half": "fp16", "amp": "fp16"}.get(key)
    text = str(value).lower()
    if "bf16" in text or "bfloat16" in text:
        return "bf16"
    if text in ("16", "16-mixed", "fp16", "float16", "half", "16-true", "mixed"):
        return "fp16"
    if text in ("32", "32-true", "fp32", "float32", "no", "full"):
        return "fp32"
    return None


def world_size(options: EffectiveOptions, launcher: LauncherLine | None, config: RunConfig | None) -> tuple[int, str]:
    """How many processes train together, and how that was worked out."""
    nodes = options.nodes
    gpus = options.gpus_per_node
    if launcher is not None and launcher.kind == "torchrun":
        nnodes = _int(launcher.option("nnodes")) or nodes
        per_node = _int(launcher.option("nproc_per_node", "nproc-per-node")) or gpus or 1
        return nnodes * per_node, f"{nnodes} node(s) × {per_node} process(es) per node (torchrun)"
    if launcher is not None and launcher.kind == "accelerate":
        total = _int(launcher.option("num_processes"))
        if total:
            return total, f"{total} process(es) (accelerate --num_processes)"
        machines = _int(launcher.option("num_machines")) or nodes
        return machines * (gpus or 1), f"{machines} machine(s) × {gpus or 1} GPU(s) (accelerate)"
    if launcher is not None and launcher.kind == "deepspeed":
        count = _int(launcher.option("num_nodes")) or nodes
        per_node = _int(launcher.option("num_gpus")) or gpus or 1
        return count * per_node, f"{count} node(s) × {per_node} GPU(s) (deepspeed)"
    if launcher is not None and ("srun" in launcher.text.split()[:1] or launcher.srun_options):
        total = _int(launcher.srun_options.get("ntasks") or launcher.srun_options.get("n"))
        if total:
            return total, f"{total} task(s) (srun -n)"
        per_node = _int(launcher.srun_options.get("ntasks-per-node")) or options.tasks_per_node
        return nodes * per_node, f"{nodes} node(s) × {per_node} task(s) per node (srun)"
    if config is not None:
        devices = _config_int(config, WORLD_KEYS)
        if devices:
            machines = _config_int(config, NODE_KEYS) or 1
            return devices * machines, f"{machines} node(s) × {devices} device(s) (from the config)"
    return 1, "one process (no distributed launcher)"


def batch_shape(config: RunConfig, world: int, world_text: str, launcher: LauncherLine | None = None) -> BatchShape:
    accumulation = _config_number(config, ACCUMULATION)
    if accumulation is None and launcher is not None:
        accumulation = as_number(launcher.option("gradient_accumulation_steps"))
    accumulation = accumulation or 1.0
    global_found = config.find(GLOBAL_BATCH)
    if global_found is not None and as_number(global_found[1]):
        total = as_number(global_found[1]) or 0.0
        per_device = total / (world * accumulation)
        return BatchShape(per_device, accumulation, world, total,
                          f"{global_found[0]}={_fmt(total)} (global) over {world_text}, accumulation "
                          f"{_fmt(accumulation)}")
    for aliases, ambiguous in ((PER_DEVICE_BATCH, False), (PLAIN_BATCH, world > 1)):
        found = config.find(aliases)
        if found is not None and as_number(found[1]):
            per_device = as_number(found[1]) or 0.0
            total = per_device * world * accumulation
            text = (f"{found[0]}={_fmt(per_device)} per device × {world_text} × accumulation {_fmt(accumulation)}"
                    f" = global {_fmt(total)}")
            return BatchShape(per_device, accumulation, world, total, text, ambiguous)
    return BatchShape(None, accumulation, world, None, "no batch size in the config")


def lr_rescaled(batch_ratio: float, lr_ratio: float) -> str | None:
    """'linear' or 'sqrt' when the LR follows the batch change by a known rule, else None."""
    if math.isclose(lr_ratio, batch_ratio, rel_tol=0.05):
        return "linear"
    if math.isclose(lr_ratio, math.sqrt(batch_ratio), rel_tol=0.05):
        return "square-root"
    return None


def values_of(config: RunConfig, aliases: tuple[str, ...]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in config.values.items():
        normalized = key.replace("-", "_").lower()
        if any(normalized == alias or normalized.endswith("." + alias) for alias in aliases):
            found[key] = value
    return found


def _config_number(config: RunConfig, aliases: tuple[str, ...]) -> float | None:
    found = config.find(aliases)
    return as_number(found[1]) if found else None


def _config_int(config: RunConfig, aliases: tuple[str, ...]) -> int | None:
    number = _config_number(config, aliases)
    return int(number) if number and number > 0 and number == int(number) else None


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        return None
    return value if value > 0 else None


def _fmt(number: float) -> str:
    return str(int(number)) if number == int(number) else f"{number:g}"
