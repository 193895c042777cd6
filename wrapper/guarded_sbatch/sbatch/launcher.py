"""Recognise the launcher line of a batch script and pull out the program, its config and its path arguments.

Handles `python train.py`, `python -m pkg`, `torchrun`, `python -m torch.distributed.run`, `accelerate launch`,
`deepspeed`, each optionally behind `srun [options]`, `exec`, `time`, `env VAR=x`, `nohup`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from guarded_sbatch.sbatch.shell_words import Word

CONFIG_EXTENSIONS = (".yaml", ".yml", ".json", ".toml")
PYTHON = re.compile(r"^(?:.*/)?python(?:3(?:\.\d+)?)?$")
PREFIX_WORDS = {"exec", "time", "nohup", "command", "do", "then", "else", "builtin", "stdbuf", "{", "("}

# Options of each launcher that take no value (everything else in `--opt value` form takes one).
TORCHRUN_FLAGS = {"standalone", "module", "m", "no-python", "no_python", "run-path", "run_path"}
ACCELERATE_FLAGS = {
    "cpu", "multi_gpu", "tpu", "ipex", "use_deepspeed", "use_fsdp", "use_megatron_lm", "use_xpu", "module", "m",
    "no_python", "debug", "quiet", "q", "same_network", "enable_cpu_affinity", "dynamo_use_fullgraph",
    "dynamo_use_dynamic", "tpu_use_cluster", "tpu_use_sudo",
}
DEEPSPEED_FLAGS = {"no_python", "module", "no_local_rank", "force_multi", "bind_cores_to_rank", "no_ssh_check",
                   "elastic_training", "enable_each_rank_log", "save_pid"}
SRUN_VALUE_LETTERS = set("AbcDdeiJLMmNnopqSTtWwxBCGF")
SRUN_FLAGS = {"label", "unbuffered", "verbose", "quiet", "overlap", "multi-prog", "pty", "preserve-env",
              "disable-status", "test-only", "overcommit", "oversubscribe", "no-allocate", "exclusive", "hold",
              "kill-on-bad-exit", "no-kill", "immediate", "contiguous", "spread-job", "use-min-nodes"}
PYTHON_VALUE_FLAGS = {"-W", "-X", "-c"}

MODULE_LAUNCHERS = {
    "torch.distributed.run": "torchrun",
    "torch.distributed.launch": "torchrun",
    "accelerate.commands.launch": "accelerate",
    "deepspeed.launcher.runner": "deepspeed",
    "deepspeed": "deepspeed",
}
CONFIG_OPTIONS = {"config", "config-file", "config_file", "cfg", "configs", "yaml", "hparams", "c", "config-path-file"}
HYDRA_NAME_OPTIONS = {"config-name", "config_name", "cn"}
HYDRA_DIR_OPTIONS = {"config-path", "config_path", "cp", "config-dir", "config_dir", "cd"}


@dataclass(frozen=True)
class LauncherLine:
    line_number: int
    text: str
    kind: str  # "python" | "torchrun" | "accelerate" | "deepspeed"
    program: str  # a script path, or a module name when is_module
    is_module: bool = False
    program_args: tuple[Word, ...] = ()
    srun_options: dict[str, str | None] = field(default_factory=dict)
    launcher_options: dict[str, str | None] = field(default_factory=dict)  # torchrun/accelerate/deepspeed
    env: dict[str, str] = field(default_factory=dict)  # VAR=value before the command
    config_path: str | None = None
    config_unresolved: bool = False
    hydra_config_dir: str | None = None
    hydra_config_name: str | None = None
    overrides: dict[str, str] = field(default_factory=dict)  # key=value and --key value, dashes as underscores
    unresolved_args: tuple[str, ...] = ()

    def option(self, *names: str) -> str | None:
        """A launcher option's value by any of its spellings (dashes or underscores)."""
        for name in names:
            for key in (name, name.replace("-", "_"), name.replace("_", "-")):
                if key in self.launcher_options and self.launcher_options[key] is not None:
                    return self.launcher_options[key]
        return None


def detect_launcher(words: list[Word], line_number: int, text: str) -> LauncherLine | None:
    """The launcher in one simple command, or None when the command launches no Python training."""
    index = 0
    env: dict[str, str] = {}
    srun_options: dict[str, str | None] = {}
    while index < len(words):
        word = words[index].text
        if word in PREFIX_WORDS:
            index += 1
        elif word == "env":
            index += 1
        elif re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", word):
            name, _, value = word.partition("=")
            env[name] = value
            index += 1
        elif word in ("srun", "mpirun", "mpiexec") or word.endswith("/srun"):
            index = _skip_options(words, index + 1, srun_options, SRUN_FLAGS, SRUN_VALUE_LETTERS)
        else:
            break
    if index >= len(words):
        return None
    head = words[index].text
    base = head.rsplit("/", 1)[-1]
    if PYTHON.match(head):
        return _python(words, index + 1, line_number, text, env, srun_options)
    if base == "torchrun":
        return _distributed("torchrun", words, index + 1, line_number, text, env, srun_options, TORCHRUN_FLAGS)
    if base == "accelerate" and index + 1 < len(words) and words[index + 1].text == "launch":
        return _distributed("accelerate", words, index + 2, line_number, text, env, srun_options, ACCELERATE_FLAGS)
    if base == "deepspeed":
        return _distributed("deepspeed", words, index + 1, line_number, text, env, srun_options, DEEPSPEED_FLAGS)
    return None


def _skip_options(
    words: list[Word], index: int, out: dict[str, str | None], flags: set[str], value_letters: set[str]
) -> int:
    while index < len(words):
        word = words[index].text
        if word == "--":
            return index + 1
        if not word.startswith("-") or word == "-":
            return index
        if word.startswith("--"):
            name, has_value, value = word[2:].partition("=")
            if has_value:
                out[name] = value
                index += 1
            elif name in flags or name.replace("-", "_") in flags or index + 1 >= len(words):
                out[name] = None
                index += 1
            else:
                out[name] = words[index + 1].text
                index += 2
        else:
            letter = word[1:2]
            if letter in value_letters:
                if len(word) > 2:
                    out[letter] = word[2:]
                    index += 1
                else:
                    out[letter] = words[index + 1].text if index + 1 < len(words) else None
                    index += 2
            else:
                out[letter] = None
                index += 1
    return index


def _python(
    words: list[Word], index: int, line_number: int, text: str, env: dict[str, str], srun: dict[str, str | None]
) -> LauncherLine | None:
    while index < len(words):
        word = words[index].text
        if word == "-m" and index + 1 < len(words):
            module = words[index + 1].text
            if module in MODULE_LAUNCHERS:
                flags = {"torchrun": TORCHRUN_FLAGS, "accelerate": ACCELERATE_FLAGS, "deepspeed": DEEPSPEED_FLAGS}
                kind = MODULE_LAUNCHERS[module]
                return _distributed(kind, words, index + 2, line_number, text, env, srun, flags[kind])
            return _program("python", module, True, words[index + 2 :], line_number, text, env, srun, {})
        if word.startswith("-m") and len(word) > 2:
            return _program("python", word[2:], True, words[index + 1 :], line_number, text, env, srun, {})
        if word == "-c":
            return None  # inline code: no program file to inspect
        if word in PYTHON_VALUE_FLAGS:
            index += 2
        elif word.startswith("-"):
            index += 1
        else:
            return _program("python", word, False, words[index + 1 :], line_number, text, env, srun, {})
    return None


def _distributed(
    kind: str,
    words: list[Word],
    index: int,
    line_number: int,
    text: str,
    env: dict[str, str],
    srun: dict[str, str | None],
    flags: set[str],
) -> LauncherLine | None:
    options: dict[str, str | None] = {}
    index = _skip_options(words, index, options, flags, set())
    if index >= len(words):
        return None
    is_module = any(key in options for key in ("m", "module"))
    return _program(kind, words[index].text, is_module, words[index + 1 :], line_number, text, env, srun, options)


def _program(
    kind: str,
    program: str,
    is_module: bool,
    args: list[Word],
    line_number: int,
    text: str,
    env: dict[str, str],
    srun: dict[str, str | None],
    launcher_options: dict[str, str | None],
) -> LauncherLine:
    config_path: str | None = None
    config_unresolved = False
    hydra_dir: str | None = None
    hydra_name: str | None = None
    overrides: dict[str, str] = {}
    unresolved: list[str] = []
    index = 0
    while index < len(args):
        word = args[index]
        if word.unresolved:
            unresolved.append(word.text)
        token = word.text
        if token.startswith("-") and len(token) > 1 and not _is_number(token):
            name, has_value, value = token.lstrip("-").partition("=")
            value_word = word
            if not has_value:
                following = args[index + 1] if index + 1 < len(args) else None
                if following is not None and (not following.text.startswith("-") or _is_number(following.text)):
                    value, value_word = following.text, following
                    index += 1
                    if following.unresolved:
                        unresolved.append(following.text)
                else:
                    value = "true"
            if name in CONFIG_OPTIONS and (name != "c" or value.endswith(CONFIG_EXTENSIONS)):
                config_path, config_unresolved = value, value_word.unresolved
            elif name in HYDRA_NAME_OPTIONS:
                hydra_name = value
            elif name in HYDRA_DIR_OPTIONS:
                hydra_dir = value
            else:
                overrides[name.replace("-", "_")] = value
        elif re.match(r"^(\+\+|\+|~)?[A-Za-z_][\w.\-/@]*=", token):
            key, _, value = token.lstrip("+~").partition("=")
            overrides[key] = value
        elif token.endswith(CONFIG_EXTENSIONS) and config_path is None:
            config_path, config_unresolved = token, word.unresolved
        index += 1
    return LauncherLine(
        line_number=line_number,
        text=text,
        kind=kind,
        program=program,
        is_module=is_module,
        program_args=tuple(args),
        srun_options=srun,
        launcher_options=launcher_options,
        env=env,
        config_path=config_path,
        config_unresolved=config_unresolved,
        hydra_config_dir=hydra_dir,
        hydra_config_name=hydra_name,
        overrides=overrides,
        unresolved_args=tuple(unresolved),
    )


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
