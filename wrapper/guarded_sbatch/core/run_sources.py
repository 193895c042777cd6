"""What belongs to one run, resolved at launch and kept in its record: the sidecar reads exactly these
and nothing of a neighbour's (its TensorBoard folders, its W&B run id, the tag on its MLflow run, its
stdout/stderr files, and the time before which no file can be its own)."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, fields
from typing import Any

MLFLOW_TAG = "guarded_sbatch.run"
# Slurm's filename patterns (sbatch(1) "filename pattern"): %A %a %j %N %u %x, %% a percent sign.
_PATTERN = re.compile(r"%(\d*)([AajNux%])")


@dataclass
class RunSources:
    since: float = 0.0  # epoch seconds: a file created earlier is not this run's
    workdir: str = ""
    tb_paths: list[str] = field(default_factory=list)  # the run's own event folders (config keys, launcher args)
    tb_from: list[str] = field(default_factory=list)  # where each came from, for the report
    output_dirs: list[str] = field(default_factory=list)
    wandb_run_id: str = ""
    wandb_id_from: str = ""  # "guarded-sbatch" (generated and exported) | "WANDB_RUN_ID set by the user"
    wandb_dirs: list[str] = field(default_factory=list)  # folders whose wandb/ may hold the run
    mlflow_tag: str = ""  # value of the MLFLOW_TAG tag the job's MLflow run carries (MLFLOW_RUN_CONTEXT)
    mlflow_run_id: str = ""  # MLFLOW_RUN_ID given by the user
    mlflow_uri: str = ""
    stdout: str = ""  # expanded, except %N on Slurm (the node is known only once it runs)
    stderr: str = ""
    unresolved: list[str] = field(default_factory=list)  # what could not be pinned down, and why

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: object) -> RunSources | None:
        if not isinstance(raw, dict) or not raw:
            return None
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in known})


def expand_filename_pattern(pattern: str, *, job_id: str, job_name: str, user: str, node: str | None = None,
                            array_job: str | None = None, array_task: str | None = None) -> str:
    """sbatch's --output/--error pattern for one job; %N stays when the node is not known yet."""
    def replace(match: re.Match[str]) -> str:
        width, code = match.group(1), match.group(2)
        if code == "%":
            return "%"
        value = {"j": job_id, "A": array_job or job_id, "a": array_task, "N": node, "u": user, "x": job_name}[code]
        if value is None:
            return match.group(0)
        return value.zfill(int(width)) if width and value.isdigit() else value

    return _PATTERN.sub(replace, pattern)
