"""W&B logging for train.py --wandb. The run id comes from WANDB_RUN_ID when it is set (guarded-sbatch
sets it for each job), the project from WANDB_PROJECT; WANDB_MODE=offline needs no account.

A requeued job starts again with the same run id while the previous attempt's wandb service may still be
shutting down ("run ID ... is in use"): wait for it rather than fail the whole run."""

from __future__ import annotations

import time
from typing import Any

IN_USE_WAIT_S = 120.0


def start_run(config: dict[str, Any]) -> Any:
    import wandb

    deadline = time.monotonic() + IN_USE_WAIT_S
    while True:
        try:
            return wandb.init(config=config)
        except Exception as exc:  # wandb raises its own error types across versions
            if "in use" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(3.0)
