"""The launch side of each kind of metric source, as data: the signs that a program uses the kind (which the
pre-flight's monitoring check looks for) and the config keys, launcher arguments and environment variables whose
value names the run's file or folder of the kind (which the launch resolves into the run's record).

The login node never imports a reader, so this is the list the pre-flight and the launch read. The built-in
kinds are declared below; sources/kinds.py's `SourceKind` carries its kind's `LaunchKind` and `register()`
adds it here, so a kind added by one module and one `register` line is detected and resolved at launch in the
process that registered it. Neptune is detection-only: the check names it, no reader reads it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Uses:
    """Signs in the program or its config, any one of which gives the finding `because`."""

    because: str  # the finding's words; "{where}" is the program's file name
    imports: tuple[str, ...] = ()  # modules the program imports (`import x` / `from x... import`)
    code: tuple[str, ...] = ()  # text anywhere in the program's source (a class name, a call)
    config_words: tuple[str, ...] = ()  # in the config's report_to / logger / loggers / tracker / log_with values
    config_prefixes: tuple[str, ...] = ()  # the start of a config key ("wandb." for wandb.project)
    arg_words: tuple[str, ...] = ()  # in the launcher's program arguments


@dataclass(frozen=True)
class LaunchKind:
    """One kind as the launch sees it (`name` is the registry's name of the kind)."""

    name: str
    env_signs: tuple[str, ...] = ()  # a variable set in the job's environment: "X is set"
    default_folders: tuple[str, ...] = ()  # under the job's folder, where the kind writes unless told: "P exists"
    uses: tuple[Uses, ...] = ()
    path_keys: tuple[str, ...] = ()  # config keys / launcher arguments (last part, `-` as `_`) naming its place
    path_env: tuple[str, ...] = ()  # environment variables naming its place, taken as is
    place: str = "folder"  # what those name: "folder" | "file"

    def signs(self) -> str:
        """A short list of what is looked for, for a report that found none."""
        imports = [f"import {name}" for use in self.uses for name in use.imports]
        code = [text for use in self.uses for text in use.code]
        looked = [*self.env_signs, *(imports or code)[:1], *(f"{d}/" for d in self.default_folders),
                  *(f"config key {key}" for key in self.path_keys[:1])]
        return f"{self.name} ({', '.join(looked)})" if looked else self.name


TENSORBOARD_KEYS = ("logdir", "log_dir", "logging_dir", "tensorboard_dir", "tensorboard_log_dir", "tb_dir", "tb_logdir",
                    "tb_log_dir", "summary_dir")  # fmt: skip

WANDB = LaunchKind("wandb", env_signs=("WANDB_API_KEY",), uses=(
    Uses("{where} imports wandb", imports=("wandb",), code=("WandbLogger",)),
    Uses("the config reports to wandb", config_words=("wandb",), config_prefixes=("wandb.", "wandb_")),
))  # fmt: skip
NEPTUNE = LaunchKind("neptune", env_signs=("NEPTUNE_API_TOKEN",), uses=(Uses("{where} imports neptune", imports=("neptune",)),))
MLFLOW = LaunchKind("mlflow", env_signs=("MLFLOW_TRACKING_URI",), uses=(
    Uses("{where} uses mlflow", imports=("mlflow",), config_words=("mlflow",)),
))  # fmt: skip
TENSORBOARD = LaunchKind("tensorboard", default_folders=("runs", "lightning_logs"), uses=(
    Uses("{where} writes TensorBoard events", imports=("tensorboard", "tensorboardX", "torch.utils.tensorboard"),
         code=("SummaryWriter", "TensorBoardLogger", "EventFileWriter"), config_words=("tensorboard",),
         arg_words=("tensorboard",)),
), path_keys=TENSORBOARD_KEYS,
   path_env=("TENSORBOARD_LOGGING_DIR",))  # $TENSORBOARD_LOGGING_DIR: transformers >= 5, the HF Trainer's folder
CSV = LaunchKind("csv", uses=(Uses("{where} writes a Lightning CSV log", code=("CSVLogger",), config_words=("csv",)),))

# name -> descriptor, in the order the check ranks trackers (the first found is the run's main one)
LAUNCH_KINDS: dict[str, LaunchKind] = {kind.name: kind for kind in (WANDB, NEPTUNE, MLFLOW, TENSORBOARD, CSV)}
_BUILT_IN = dict(LAUNCH_KINDS)


def register_launch(kind: LaunchKind) -> LaunchKind:
    LAUNCH_KINDS[kind.name] = kind
    return kind


def unregister_launch(name: str) -> None:
    """Forget an added kind (a built-in one is put back as declared here)."""
    if name in _BUILT_IN:
        LAUNCH_KINDS[name] = _BUILT_IN[name]
    else:
        LAUNCH_KINDS.pop(name, None)


def launch_kinds() -> list[LaunchKind]:
    return list(LAUNCH_KINDS.values())


def place_of(kind: str) -> str:
    """What a kind's keys name, "file" or "folder" (a kind without a launch side: "folder")."""
    found = LAUNCH_KINDS.get(kind)
    return found.place if found is not None else "folder"
