"""Build a batch script from a launcher command: `guarded-sbatch [sbatch options] torchrun train.py ...`.

When the word after the sbatch options is a launcher (torchrun, accelerate launch, deepspeed, python/python3,
`python -m torch.distributed.run` ...) instead of a script file, the matching template in sbatch_templates/
(or a site's template_dirs) is rendered with the launcher's words. The sbatch options themselves stay on
sbatch's command line, unchanged, exactly as for a user's script: the rendered script only adds what the
launcher needs (rendezvous, processes per node) and the preemption handling (USR1 before the time limit,
checkpoint, requeue). The rendered script then goes through the same pre-flight and submission as a
user's script; its launcher line carries literal node and process counts, so the pre-flight's world size
(and with it the global-batch and learning-rate checks) is the one the job will have.
"""

from __future__ import annotations

import os
import re
import shlex
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from guarded_sbatch.core import door
from guarded_sbatch.core.errors import UsageError
from guarded_sbatch.sbatch.argv import LaunchArgs
from guarded_sbatch.sbatch.launcher import ACCELERATE_FLAGS, DEEPSPEED_FLAGS, PYTHON, TORCHRUN_FLAGS
from guarded_sbatch.sbatch.options import EffectiveOptions, effective_options
from guarded_sbatch.launch.templates import load_template, render_template
from guarded_sbatch.core.fsutil import make_private_dirs, state_dir

TEMPLATES = {"torchrun": "torchrun.sbatch", "accelerate": "accelerate.sbatch",
             "deepspeed": "deepspeed.sbatch", "python": "python.sbatch"}
MODULE_KINDS = {"torch.distributed.run": "torchrun", "torch.distributed.launch": "torchrun",
                "accelerate.commands.launch": "accelerate", "deepspeed": "deepspeed",
                "deepspeed.launcher.runner": "deepspeed"}
PYTHON_VALUE_OPTIONS = {"-W", "-X", "-Q"}
MAX_SIGNAL_MARGIN_S = 65535  # sbatch's --signal limit
# Launcher options the template sets itself: the user's value is taken out of the words and rendered in.
OWNED_OPTIONS = {
    "torchrun": {"nnodes": "NNODES", "nproc_per_node": "NPROC_PER_NODE"},
    "accelerate": {"num_machines": "NNODES", "num_processes": "NUM_PROCESSES", "machine_rank": "0 (c10d ranks the nodes)"},
    "deepspeed": {"num_nodes": "NNODES", "num_gpus": "NPROC_PER_NODE"},
}
LAUNCHER_FLAGS = {"torchrun": TORCHRUN_FLAGS, "accelerate": ACCELERATE_FLAGS, "deepspeed": DEEPSPEED_FLAGS}


@dataclass(frozen=True)
class LauncherCommand:
    """The launcher of a one-command job: its kind, the words that start it, and everything after them."""

    kind: str  # "torchrun" | "accelerate" | "deepspeed" | "python"
    launcher_words: tuple[str, ...]  # ("torchrun",), ("accelerate", "launch"), ("python3", "-m", "torch.distributed.run")
    args: tuple[str, ...]  # the launcher's own options, the program and its arguments, as given

    @property
    def words(self) -> tuple[str, ...]:
        return (*self.launcher_words, *self.args)


@dataclass(frozen=True)
class PreemptionSettings:
    signal_margin_s: int = 300
    max_requeues: int = 3


@dataclass(frozen=True)
class LauncherJob:
    command: LauncherCommand
    template_name: str
    template_path: Path
    text: str  # the rendered batch script: exactly what is submitted (and printed by --guard-print-script)
    values: Mapping[str, str]


def is_launcher_word(word: str) -> bool:
    base = word.rsplit("/", 1)[-1]
    return base in ("torchrun", "accelerate", "deepspeed") or bool(PYTHON.match(word))


def parse_launcher_command(first: str, rest: Sequence[str], cwd: Path | None = None) -> LauncherCommand | None:
    """The launcher command starting at `first`, or None when `first` is a batch script to submit as it is.

    A word that names an existing file relative to the submission folder stays a script (a file called
    `python` next to you wins over the interpreter, as it would for sbatch)."""
    if not is_launcher_word(first):
        return None
    if "/" not in first and (cwd or Path.cwd()).joinpath(first).is_file():
        return None
    base = first.rsplit("/", 1)[-1]
    args = tuple(rest)
    if base == "accelerate":
        if not args or args[0] != "launch":
            raise UsageError("only `accelerate launch ...` can be submitted as a job; write `accelerate launch train.py ...`")
        return LauncherCommand("accelerate", (first, "launch"), args[1:])
    if base in ("torchrun", "deepspeed"):
        return LauncherCommand(base, (first,), args)
    index = 0
    while index < len(args) and args[index].startswith("-") and args[index] not in ("-m", "-c", "-"):
        index += 2 if args[index] in PYTHON_VALUE_OPTIONS else 1
    if index + 1 < len(args) and args[index] == "-m" and args[index + 1] in MODULE_KINDS:
        return LauncherCommand(MODULE_KINDS[args[index + 1]], (first, *args[: index + 2]), args[index + 2 :])
    if not args:
        raise UsageError(f"`{first}` needs a program to run: e.g. `{first} train.py --config configs/x.yaml`")
    return LauncherCommand("python", (first,), args)


def take_owned_options(command: LauncherCommand) -> tuple[dict[str, str], tuple[str, ...]]:
    """Split the launcher's options the template sets (nnodes, nproc-per-node ...) from the other words.

    Only the options before the program are the launcher's; the program's own arguments are never touched."""
    owned = OWNED_OPTIONS.get(command.kind, {})
    flags = {flag.replace("-", "_") for flag in LAUNCHER_FLAGS.get(command.kind, set())}
    taken: dict[str, str] = {}
    kept: list[str] = []
    words = list(command.args)
    index = 0
    while index < len(words):
        word = words[index]
        if word in ("-", "--") or not word.startswith("-"):
            break  # the program (or `--` before it): the rest belongs to it
        if word.startswith("--"):
            name, equals, value = word[2:].partition("=")
            has_value = bool(equals)
        else:
            name, has_value, value = word[1:2], len(word) > 2, word[2:]
        key = name.replace("-", "_")
        option_words = [word]
        if not has_value and key not in flags and index + 1 < len(words):
            value = words[index + 1]
            option_words.append(value)
        index += len(option_words)
        if key in owned:
            taken[key] = value
        else:
            kept.extend(option_words)
    kept.extend(words[index:])
    return taken, tuple(kept)


def render_launcher_job(
    command: LauncherCommand,
    options: EffectiveOptions,
    settings: PreemptionSettings,
    template_dirs: Sequence[Path] = (),
) -> LauncherJob:
    """The batch script for `command` under these sbatch options: a pure function of its inputs."""
    limit = options.time_limit_s
    if not 0 < settings.signal_margin_s <= MAX_SIGNAL_MARGIN_S:
        raise UsageError(f"the signal margin must be 1..{MAX_SIGNAL_MARGIN_S} s, not {settings.signal_margin_s}")
    if limit is not None and settings.signal_margin_s >= limit:
        raise UsageError(
            f"the signal margin ({settings.signal_margin_s} s before the end) is not shorter than the time limit "
            f"({limit} s): lower it with --guard-signal-margin or raise --time"
        )
    if settings.max_requeues < 0:
        raise UsageError(f"the requeue count must be 0 or more, not {settings.max_requeues}")
    taken, args = take_owned_options(command)
    nodes = options.nodes
    per_node = taken.get("nproc_per_node") or taken.get("num_gpus") or str(options.gpus_per_node or 1)
    values: dict[str, str] = {
        "LAUNCHER": shlex.join(command.launcher_words),
        "LAUNCHER_ARGS": shlex.join(args),
        "SIGNAL_MARGIN_SECONDS": str(settings.signal_margin_s),
        "MAX_REQUEUES": str(settings.max_requeues),
        "NNODES": _nnodes(command.kind, options, taken),
        "NPROC_PER_NODE": _checked_count(per_node, command.kind, allow_auto=command.kind == "torchrun"),
    }
    if command.kind == "accelerate":
        total = taken.get("num_processes") or str(nodes * (options.gpus_per_node or 1))
        values["NUM_PROCESSES"] = _checked_count(total, command.kind)
        values["ACCELERATE_KIND"] = _accelerate_kind(int(values["NUM_PROCESSES"]), args)
    if command.kind == "python":
        tasks = nodes * options.tasks_per_node
        values["SRUN"] = "srun --kill-on-bad-exit=1 " if tasks > 1 else ""
        values["SRUN_NOTE"] = f", one process per task ({tasks} tasks, srun)" if tasks > 1 else ", one process"
    name = TEMPLATES[command.kind]
    template_text, template_path = load_template(name, list(template_dirs))
    text = render_template(template_text, values, template_name=str(template_path))
    return LauncherJob(command, name, template_path, text, values)


# accelerate's distributed types: one given by the job is kept (and no other added)
_ACCELERATE_KINDS = ("--multi_gpu", "--cpu", "--tpu", "--use_deepspeed", "--use_fsdp", "--use_megatron_lm", "--use_xpu")


def _accelerate_kind(processes: int, args: Sequence[str]) -> str:
    """`--multi_gpu ` for more than one process: without a GPU, accelerate would otherwise start a single process
    (its torchrun launcher, with gloo on CPU, needs that flag)."""
    program_at = next((i for i, word in enumerate(args) if not word.startswith("-")), len(args))
    named = any(word.split("=")[0] in _ACCELERATE_KINDS for word in args[:program_at])
    return "--multi_gpu " if processes > 1 and not named else ""


def _nnodes(kind: str, options: EffectiveOptions, taken: Mapping[str, str]) -> str:
    given = taken.get("nnodes") or taken.get("num_machines") or taken.get("num_nodes")
    if given is not None:
        return _checked_count(given, kind, allow_range=kind == "torchrun")
    text = options.get("nodes") or "1"
    if kind == "torchrun" and re.fullmatch(r"\d+-\d+", text):
        return text.replace("-", ":")  # sbatch's min-max nodes is torchrun's elastic min:max
    return str(options.nodes)


def _checked_count(text: str, kind: str, *, allow_auto: bool = False, allow_range: bool = False) -> str:
    if re.fullmatch(r"[1-9]\d*", text) or (allow_range and re.fullmatch(r"[1-9]\d*:[1-9]\d*", text)):
        return text
    if allow_auto and text in ("auto", "cpu", "gpu", "xpu"):
        return text
    raise UsageError(f"{kind}: {text!r} is not a process or node count; give a whole number such as 2")


def preemption_settings(config: object, launch: LaunchArgs) -> PreemptionSettings:
    """Guard options win over the site/user config's [launcher] table."""
    defaults = getattr(config, "launcher", None)
    guard = launch.guard_options
    margin = guard.signal_margin_s if guard.signal_margin_s is not None else getattr(defaults, "signal_margin_s", 300)
    requeues = guard.max_requeues if guard.max_requeues is not None else getattr(defaults, "max_requeues", 3)
    return PreemptionSettings(int(margin), int(requeues))


def launcher_command_of(launch: LaunchArgs, cwd: Path | None = None) -> LauncherCommand | None:
    if launch.script is None:
        return None
    return parse_launcher_command(str(launch.script), launch.script_args, cwd)


def build_launcher_job(
    launch: LaunchArgs, command: LauncherCommand, config: object, env: Mapping[str, str] | None = None
) -> LauncherJob:
    """Render the job for a parsed command line; the effective options are sbatch's (command line, SBATCH_*)."""
    options = effective_options(launch.parsed_options, [], dict(os.environ if env is None else env))
    template_dirs = tuple(getattr(config, "template_dirs", ()))
    return render_launcher_job(command, options, preemption_settings(config, launch), template_dirs)


def write_job_script(job: LauncherJob, folder: Path) -> Path:
    """Write the rendered script under `folder` with a name of its own; it is submitted from there."""
    make_private_dirs(folder)
    path = folder / f"{job.command.kind}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{time.monotonic_ns() % 10**6}.sbatch"
    door.write_new(path, job.text, 0o600)
    return path


def staging_folder() -> Path:

    return state_dir() / "launcher-scripts"


def as_script_launch(launch: LaunchArgs, script_path: Path) -> LaunchArgs:
    """The same launch with the rendered script in place of the launcher words (sbatch options unchanged)."""
    return replace(launch, script=script_path, script_args=())


MAX_SCRIPT_BYTES = 16 << 20


def keep_with_run(script_path: Path, run_folder: Path, *, remove_original: bool) -> Path:
    """Put the submitted script into the run's folder as job.sbatch. Slurm keeps its own copy once sbatch
    accepted it; the local backend runs the file where it is, so there it stays too."""
    target = run_folder / "job.sbatch"
    door.write_atomic(target, door.read(script_path, MAX_SCRIPT_BYTES).data, 0o600)
    if remove_original:
        door.remove(script_path)
    return target
