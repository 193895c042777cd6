"""The site's enforcement policy: what counts as a training job, and what Slurm's plugins do with an
unguarded one ("reject", "tag" or "allow"). Read from the site config's [enforcement] table only (a user
config cannot loosen it), and rendered as a small Lua file the plugins load:

    guarded-sbatch admin render-policy /etc/guarded-sbatch/site.toml /etc/slurm/guarded_sbatch_policy.lua
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from guarded_sbatch.core.config import setting, setting_value
from guarded_sbatch.core.config_files import SITE_CONFIG_ENV, read_toml, site_config_paths
from guarded_sbatch.core.config_schema import KEYS
from guarded_sbatch.core.errors import UsageError
from guarded_sbatch.core.suggest import did_you_mean
from guarded_sbatch.sbatch.launcher import LauncherLine
from guarded_sbatch.sbatch.script import ParsedScript
from guarded_sbatch.site import launch_forms

HOW_TO_SUBMIT = "module load guarded-sbatch; guarded-sbatch [options] script.sh"


@dataclass(frozen=True)
class EnforcementPolicy:
    """The [enforcement] settings: each field's key, default and check are the config schema's."""

    unguarded_training: str = setting("enforcement.unguarded_training")  # reject | tag | allow
    launchers: tuple[str, ...] = setting("enforcement.launchers")
    training_commands: tuple[str, ...] = setting("enforcement.training_commands")
    exempt_programs: tuple[str, ...] = setting("enforcement.exempt_programs")
    tag: str = setting("enforcement.tag")
    tag_field: str = setting("enforcement.tag_field")  # admin_comment | comment
    source: str = "<defaults>"
    switched_off: bool = False  # `enabled = false` in the site config


def policy_from_table(table: Mapping[str, Any], source: str) -> EnforcementPolicy:
    """The policy of an [enforcement] table, every value checked as the schema says (one line for a bad one)."""
    def fail(key: str, what: str) -> UsageError:
        return UsageError(f"{source}: '{key}' {what}")

    own = [key.path.removeprefix("enforcement.") for key in KEYS.values() if key.path.startswith("enforcement.")]
    for name in table:
        if name not in own:
            raise UsageError(f"{source}: unknown key 'enforcement.{name}'; {did_you_mean(name, own)}known: {', '.join(own)}")
    values = {item.name: setting_value(item, table.get(item.metadata["key"].removeprefix("enforcement."),
                                                       KEYS[item.metadata["key"]].default), fail)
              for item in fields(EnforcementPolicy) if "key" in item.metadata}
    return EnforcementPolicy(**{**values, "tag": values["tag"].strip()}, source=source)


def load_policy(site_path: Path | None = None, env: Mapping[str, str] | None = None) -> EnforcementPolicy:
    """The [enforcement] table of the site configs (the one GUARDED_SBATCH_SITE_CONFIG names, then the system one at
    /etc/guarded-sbatch/site.toml, which wins and which no environment can unset), else the defaults."""
    environ = os.environ if env is None else env
    paths = [site_path] if site_path is not None else site_config_paths(environ)
    if not paths:
        return EnforcementPolicy()
    table: dict[str, Any] = {}
    enabled = True
    for path in paths:
        if not path.is_file():
            raise UsageError(f"site config {path} is not a file; ask your site admin (or fix {SITE_CONFIG_ENV})")
        site = read_toml(path)
        part = site.get("enforcement", {})
        if not isinstance(part, dict):
            raise UsageError(f"{path}: 'enforcement' must be a table ([enforcement])")
        table.update(part)
        enabled = site.get("enabled", enabled) is not False
    policy = policy_from_table(table, " + ".join(str(p) for p in paths))
    if not enabled:  # the site switch-off: the plugins let every job through
        policy = replace(policy, unguarded_training="allow", switched_off=True)
    return policy


def is_exempt(program: str, policy: EnforcementPolicy) -> bool:
    return launch_forms.is_exempt(program, policy.exempt_programs)


# Wrappers whose own options the launcher-line parser does not know: a launcher anywhere after one of them counts
# (`srun --exact -n 2 python x.py`, `mpirun -np 4 python x.py`, `timeout 1h python x.py`, containers).
WRAPPERS = frozenset({"srun", "mpirun", "mpiexec", "timeout", "singularity", "apptainer", "enroot", "podman", "docker",
                      "numactl", "taskset"})
_PREFIXES = frozenset({"exec", "time", "nohup", "command", "do", "then", "else", "builtin", "stdbuf", "{", "(", "env"})
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_PYTHON_SHEBANG = re.compile(r"^#!\S*python[0-9.]*(?:\s|$)|^#!\S*/env\s+(?:-\S+\s+)*python[0-9.]*(?:\s|$)")


def wrapped_launcher(words: Sequence[str]) -> tuple[str, str] | None:
    """(kind, program) of a launcher behind a wrapper in one simple command, else None (the Lua twin:
    lib.wrapped_launcher)."""
    index = 0
    while index < len(words) and (words[index] in _PREFIXES or _ASSIGNMENT.match(words[index])):
        index += 1
    if index >= len(words) or words[index].rsplit("/", 1)[-1] not in WRAPPERS:
        return None
    for at in range(index + 1, len(words)):
        found = launch_forms.launcher_kind(words, at)
        if found is None:
            continue
        kind, rest = found
        if kind == "python" and rest[:1] == ["-c"]:
            return None  # inline code, as without a wrapper
        return kind, next((word for word in rest if not word.startswith("-")), "")
    return None


def training_reason(script: ParsedScript, policy: EnforcementPolicy) -> str | None:
    """Why this script is a training job (its line), or None when it is not one."""
    first = script.text.split("\n", 1)[0].strip()
    if "python" in policy.launchers and _PYTHON_SHEBANG.match(first):
        return f"line 1: {first}"  # `sbatch train.py`: the whole script is Python
    launchers: list[LauncherLine] = [x for x in (script.launcher, *script.other_launchers) if x is not None]
    for launcher in launchers:
        if launcher.kind in policy.launchers and not is_exempt(launcher.program, policy):
            return f"line {launcher.line_number}: {launcher.text}"
    for command in script.commands:
        found = wrapped_launcher([word.text for word in command.words])
        if found is not None and found[0] in policy.launchers and not is_exempt(found[1], policy):
            return f"line {command.line_number}: {command.text}"
    for command in script.commands:
        for needle in policy.training_commands:
            if needle in command.text:
                return f"line {command.line_number}: {command.text}"
    return launch_forms.unclassified_launch(script.text, policy.launchers, policy.exempt_programs)  # fails closed


def lua_string(text: str) -> str:
    out = []
    for byte in text.encode("utf-8"):
        char = chr(byte)
        if char in '"\\':
            out.append("\\" + char)
        elif 32 <= byte < 127:
            out.append(char)
        else:
            out.append(f"\\{byte:03d}")
    return '"' + "".join(out) + '"'


def render_lua_policy(policy: EnforcementPolicy) -> str:
    def items(values: Sequence[str]) -> str:
        return "{" + ", ".join(lua_string(v) for v in values) + "}"

    return "\n".join([
        f"-- guarded-sbatch enforcement policy, written from {policy.source} by",
        "-- `guarded-sbatch admin render-policy SITE.toml OUT.lua`. Edit the site config and render again;",
        "-- cli_filter.lua and job_submit.lua read this file on every submission (no reconfigure needed).",
        "return {",
        f"  unguarded_training = {lua_string(policy.unguarded_training)},  -- reject | tag | allow"
        + ("  (the site switched guarded-sbatch off: enabled = false)" if policy.switched_off else ""),
        f"  launchers = {items(policy.launchers)},",
        f"  training_commands = {items(policy.training_commands)},",
        f"  exempt_programs = {items(policy.exempt_programs)},",
        f"  tag = {lua_string(policy.tag)},",
        f"  tag_field = {lua_string(policy.tag_field)},  -- admin_comment | comment",
        f"  how_to_submit = {lua_string(HOW_TO_SUBMIT)},",
        "}",
        "",
    ])
