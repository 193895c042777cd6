"""A launch with no config file: its launcher line is its config.

`torchrun --nproc_per_node 4 train.py --lr 3e-4 --steps 500` configures a run as surely as a YAML file does. When
the launcher line names no config file (and none is named with the guard's own option), the run's config is what
the line sets: the script's arguments (`lr`, `steps`), the distributed launcher's options (`torchrun --nnodes`, ...;
accelerate's `--mixed_precision` and `--gradient_accumulation_steps` under the names the regressors read), the
hyper-parameters the script or the line sets in the environment (`LR=3e-4`, `export BATCH_SIZE=64`), and the world
size the job will have. The run's family is its program (the script the line runs, or the batch script when no
launcher line is found): its reference is the run of that program named with `guarded-sbatch reference RUN`, else
the last one that finished healthy, else its previous launch (launch/run_reference.py keeps the family's runs).
config-diff then diffs the two lines as it diffs two configs; the first run of a program is a new project.
"""

from __future__ import annotations

from typing import Any

from guarded_sbatch.launch.checks import regressors as r
from guarded_sbatch.launch.context import PreflightContext
from guarded_sbatch.launch.runconfig import RunConfig

PROGRAM = "launch.program"  # the run's family, as {"family": ...} (no string: never read as a path by the paths check)
WORLD = "launch.world_size"  # processes training together, as worked out at launch (read as WORLD_KEYS' world_size)
HYPER_PARAMETERS = frozenset(alias for group in (
    r.PER_DEVICE_BATCH, r.GLOBAL_BATCH, r.PLAIN_BATCH, r.ACCUMULATION, r.LEARNING_RATE, r.BETAS, r.WEIGHT_DECAY,
    r.WORKERS, r.SEED, r.PRECISION, ("max_steps", "steps", "epochs", "num_epochs", "max_epochs", "warmup_steps"),
) for alias in group)
# Options that change from launch to launch without changing the training (rendezvous, ports, ranks, logs).
NOISE = frozenset({"rdzv_id", "rdzv-id", "rdzv_endpoint", "rdzv-endpoint", "master_addr", "master-addr", "master_port",
                   "master-port", "main_process_ip", "main_process_port", "node_rank", "node-rank", "machine_rank",
                   "log_dir", "log-dir", "redirects", "tee", "role", "max_restarts", "max-restarts"})
RUNNER_MODULES = ("submitit.",)  # a generic runner: the run name tells its runs apart (GuardedExecutor)


def wants_launcher_config(context: PreflightContext) -> bool:
    """Whether this launch names no config file anywhere (nor a reference to diff against)."""
    guard = context.launch.guard_options
    if guard.config is not None or guard.reference is not None:
        return False
    launcher = context.launcher
    return launcher is None or (launcher.config_path is None and launcher.hydra_config_name is None)


def is_launcher_config(config: RunConfig | None) -> bool:
    return config is not None and family_of(config) is not None


def family_of(config: RunConfig) -> str | None:
    """The family of a launcher config (intended, or as its snapshot was read back)."""
    found = config.values.get(PROGRAM)
    return found.get("family") if isinstance(found, dict) and isinstance(found.get("family"), str) else None


def launcher_config(context: PreflightContext, run_name: str | None) -> RunConfig:
    """The launcher line as the run's config (see the module's doc)."""
    launcher = context.launcher
    overrides: dict[str, Any] = dict(launcher.overrides) if launcher is not None else {}
    values: dict[str, Any] = {PROGRAM: {"family": family(context, run_name)}, **overrides}
    if launcher is not None:
        for name, value in launcher.launcher_options.items():
            if name not in NOISE:
                values[f"{launcher.kind} --{name}"] = True if value is None else value
        for name in ("mixed_precision", "gradient_accumulation_steps"):
            given = launcher.option(name)
            if given is not None:
                values[f"launch.{name}"] = given
    for name, value in _environment(context).items():
        values[f"env.{name}"] = value
    values[WORLD] = r.world_size(context.options, launcher, RunConfig(None, dict(values), (), overrides))[0]
    return RunConfig(None, values, (), overrides)


def family(context: PreflightContext, run_name: str | None) -> str:
    launcher = context.launcher
    if launcher is None:
        script = context.launch.script
        return str(context.resolve(str(script))) if script is not None else "--wrap"
    if not launcher.is_module:
        return str(context.resolve(launcher.program))
    if launcher.program.startswith(RUNNER_MODULES) and run_name:
        return f"{launcher.program} {run_name}"
    return launcher.program


def hyper_parameters(config: RunConfig) -> list[str]:
    """The keys of a launcher config that set something (all but its family and world size)."""
    return [key for key in config.values if key not in (PROGRAM, WORLD)]


def _environment(context: PreflightContext) -> dict[str, str]:
    """Hyper-parameters set in the environment by the launcher line (`LR=3e-4 python ...`) or the script
    (`export BATCH_SIZE=64`): upper-case names that are one of the regressors' keys."""
    launcher = context.launcher
    found = {**context.script.variables, **(launcher.env if launcher is not None else {})}
    return {name: value for name, value in sorted(found.items())
            if name.isupper() and name.lower() in HYPER_PARAMETERS and "$" not in value}
