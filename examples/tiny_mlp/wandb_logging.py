"""W&B logging for train.py --wandb. The run id comes from WANDB_RUN_ID when it is set (guarded-sbatch
sets it for each job), the project from WANDB_PROJECT; WANDB_MODE=offline needs no account."""

from __future__ import annotations

from typing import Any


def start_run(config: dict[str, Any]) -> Any:
    import wandb

    return wandb.init(config=config)
