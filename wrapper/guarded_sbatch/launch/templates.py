"""Render sbatch templates: `{{name}}` placeholders only, so bash's own `${...}` survives untouched.

A placeholder without a value is an error, never a silent blank. Every value is validated before it is
inserted: each known placeholder has a type (a count, a memory size, a job id, already-quoted shell
words, #SBATCH lines of checked values), and a placeholder of a site's own template takes only a plain
word. A value that fails is a UsageError naming the placeholder, so nothing unchecked reaches bash.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable, Mapping
from importlib import resources
from pathlib import Path

from guarded_sbatch.core import door
from guarded_sbatch.core.errors import UsageError

PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


def placeholders(text: str) -> set[str]:
    return set(PLACEHOLDER.findall(text))


SAFE_RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+=@-]{0,127}")
_COUNT = re.compile(r"[1-9][0-9]{0,5}")
_WORD = re.compile(r"[A-Za-z0-9._:/@%+=,-]{0,256}")
_PATH = re.compile(r"/[A-Za-z0-9._/%@+=,-]{0,4000}")
_MEM = re.compile(r"[1-9][0-9]{0,8}[KMGT]?B?", re.IGNORECASE)
_NAME_LIST = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,63}(,[A-Za-z0-9_][A-Za-z0-9._-]{0,63}){0,31}")
_TIME = re.compile(r"(\d{1,5}-\d{1,2}(:\d{1,2}){0,2}|\d{1,7}(:\d{1,2}){0,2}|UNLIMITED|INFINITE|infinite|unlimited)")
_SBATCH_LINE = re.compile(r"#SBATCH --(partition|account|qos|time)=([^\s\\'\"`$;&|<>(){}]+)")


def _shell_words(value: str) -> bool:
    """Already quoted for bash: splitting and re-joining gives the same text back."""
    try:
        return value == shlex.join(shlex.split(value)) and "\0" not in value
    except ValueError:
        return False


def _sbatch_lines(value: str) -> bool:
    for line in value.split("\n") if value else []:
        match = _SBATCH_LINE.fullmatch(line)
        if match is None:
            return False
        kind, text = match.groups()
        pattern = _TIME if kind == "time" else _NAME_LIST
        if not pattern.fullmatch(text):
            return False
    return True


def _count_or(*extra: str, allow_range: bool = False) -> Callable[[str], bool]:
    def check(value: str) -> bool:
        if value in extra or _COUNT.fullmatch(value):
            return True
        return allow_range and re.fullmatch(r"[1-9][0-9]{0,5}:[1-9][0-9]{0,5}", value) is not None

    return check


VALIDATORS: dict[str, tuple[str, Callable[[str], bool]]] = {
    # whatever a backend's ids look like (Slurm's 12 and 12_3, a new backend's own, ...): one word of
    # characters that mean nothing to bash inside double quotes or a comment
    "TRAIN_JOB_ID": (
        "a job id (letters, digits, _ . @ : + -)",
        lambda v: re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.@:+-]{0,63}", v) is not None,
    ),
    "SIDECAR_JOB_NAME": (
        "a job name (letters, digits, . _ + = @ -)",
        lambda v: re.fullmatch(r"[A-Za-z0-9._+=@-]{1,128}", v) is not None,
    ),
    "SIDECAR_OUTPUT": ("an absolute path of plain characters", lambda v: _PATH.fullmatch(v) is not None),
    "SIDECAR_CPUS": ("a CPU count", lambda v: _COUNT.fullmatch(v) is not None),
    "SIDECAR_MEM": ("a memory size such as 400M or 2G", lambda v: _MEM.fullmatch(v) is not None),
    "SIDECAR_EXTRA_SBATCH": ("#SBATCH lines of a checked partition/account/qos/time", _sbatch_lines),
    "PYTHON": ("a quoted command", _shell_words),
    "RUN_DIR": ("an absolute path of plain characters", lambda v: _PATH.fullmatch(v) is not None),
    "LAUNCHER": ("a quoted command", _shell_words),
    "LAUNCHER_ARGS": ("quoted arguments", _shell_words),
    "SIGNAL_MARGIN_SECONDS": ("a number of seconds", lambda v: _COUNT.fullmatch(v) is not None),
    "MAX_REQUEUES": ("a whole number", lambda v: re.fullmatch(r"[0-9]{1,4}", v) is not None),
    "NNODES": ("a node count", _count_or(allow_range=True)),
    "NPROC_PER_NODE": ("a process count", _count_or("auto", "cpu", "gpu", "xpu")),
    "NUM_PROCESSES": ("a process count", _count_or()),
    "ACCELERATE_KIND": ("accelerate's distributed type", lambda v: v in ("", "--multi_gpu ")),
    "SRUN": ("the srun prefix", lambda v: v in ("", "srun --kill-on-bad-exit=1 ")),
    "SRUN_NOTE": ("a note", lambda v: re.fullmatch(r"[A-Za-z0-9 ,()]{0,80}", v) is not None),
}
# the shared monitor's script takes the same kinds of values as the sidecar's
VALIDATORS.update(MONITOR_DIR=VALIDATORS["SIDECAR_OUTPUT"], MONITOR_OUTPUT=VALIDATORS["SIDECAR_OUTPUT"],
                  MONITOR_JOB_NAME=VALIDATORS["SIDECAR_JOB_NAME"])


def check_value(name: str, value: object) -> str:
    """`value` when it is safe for placeholder `name`; UsageError (one line) when it is not."""
    kind, valid = VALIDATORS.get(name, ("a plain word (letters, digits, ._:/@%+=,-)", lambda v: _WORD.fullmatch(v) is not None))
    if not isinstance(value, str) or not valid(value):
        shown = repr(value)
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        raise UsageError(
            f"refusing to render {{{{{name}}}}} = {shown}: not {kind}; fix the value (config, "
            "run name or command line) so nothing unchecked reaches the batch script"
        )
    return value


def check_run_name(name: object) -> str:
    """A run name safe for job names, folder names and scripts, or UsageError."""
    if not isinstance(name, str) or not SAFE_RUN_NAME.fullmatch(name):
        shown = repr(name) if len(repr(name)) <= 80 else repr(name)[:77] + "..."
        raise UsageError(
            f"run name {shown} is not usable: give 1-128 letters, digits, '.', '_', '-', '+', '=' "
            "or '@' starting with a letter or digit (--guard-run-name or --job-name)"
        )
    return name


def render_template(text: str, values: Mapping[str, str], *, template_name: str = "template") -> str:
    missing = sorted(placeholders(text) - set(values))
    if missing:
        raise UsageError(
            f"{template_name}: no value for placeholder(s) {', '.join(missing)}; "
            "give them in the site config or on the command line"
        )
    checked = {name: check_value(name, values[name]) for name in placeholders(text)}
    return PLACEHOLDER.sub(lambda m: checked[m.group(1)], text)


def builtin_templates_dir() -> Path:
    """The templates shipped inside the package (package data: a wheel installed into /opt has them too)."""
    return Path(str(resources.files("guarded_sbatch") / "sbatch_templates"))


MAX_TEMPLATE_BYTES = 256 * 1024


def load_template(name: str, search_dirs: list[Path] | None = None) -> tuple[str, Path]:
    """Find `name` (e.g. "sidecar.sbatch") in the site's dirs first, then the built-in ones. A template runs as the
    user: one outside the package is taken only from an admin's folder (root's, neither it nor a folder above
    writable by group or others, ACLs included) and must be root's file nobody else can write; anything else is
    refused with the reason, never silently replaced by the built-in one."""
    builtin = builtin_templates_dir()
    for folder in [*(search_dirs or []), builtin]:
        candidate = folder / name
        if not candidate.is_file():
            continue
        try:
            found = door.read(candidate, MAX_TEMPLATE_BYTES)
            text = found.text()
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read template {candidate}: {exc}; fix its permissions or encoding") from None
        if candidate.parent != builtin:
            refusal = _admin_refusal(candidate, found.writers)
            if refusal:
                raise UsageError(f"template {candidate} refused: {refusal}; templates come from the package or a "
                                 "folder only root can write (ask your site admin)")
        return text, candidate
    raise UsageError(
        f"no sbatch template named {name!r}; look in guarded_sbatch/sbatch_templates/ or the site config's template_dirs"
    )


def _admin_refusal(path: Path, writers: door.Writers) -> str:
    if writers.owner != 0:
        return f"it belongs to {door.trust.user_name(writers.owner)}, not root"
    if writers.others:
        return writers.why()
    for folder in [path.parent, *path.parent.parents]:
        try:
            info = os.stat(folder)
        except OSError as exc:
            return f"{folder}: {exc.strerror}"
        if info.st_uid != 0:
            return f"its folder {folder} belongs to {door.trust.user_name(info.st_uid)}, not root"
        if info.st_mode & 0o022 and not (folder != path.parent and info.st_mode & 0o1000):
            return f"its folder {folder} is writable by group or others (mode {info.st_mode & 0o7777:04o})"
        acl = door.trust.own_writers(str(folder), info, door.trust.acl_of(str(folder)))
        if acl and not info.st_mode & 0o1000:
            return acl[0]
    return ""
