"""Read a batch script: its #SBATCH lines (as sbatch reads them), its plain variables and its launcher line.

Nothing here runs a shell: lines are split by shell_words, variables are those the script assigns simply
(`DATA=/scratch/x`, `CONFIG=${1:-x.yaml}`, `export WANDB_PROJECT=coco`; script_shell.py) plus the environment.
"""

from __future__ import annotations

import errno
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from guarded_sbatch.core.errors import UsageError
from guarded_sbatch.core.fsutil import TooLargeError, read_bounded
from guarded_sbatch.sbatch.argv import ParsedOption
from guarded_sbatch.sbatch.directives import scan_directives
from guarded_sbatch.sbatch.launcher import LauncherLine, detect_launcher
from guarded_sbatch.sbatch.script_shell import ScriptShell, spread_all_args
from guarded_sbatch.sbatch.shell_words import ShellSyntaxError, Word

MAX_SCRIPT_BYTES = 4 * 1024 * 1024  # sbatch itself refuses scripts over 4 MB
DIRECTIVE = re.compile(r"^#SBATCH(?:\s|$)")
# `#sbatch -p x`, `#Sbatch`, `# SBATCH --x`: look like directives, but sbatch ignores them (`##SBATCH` is the
# usual way to switch one off on purpose and is not reported)
NEAR_DIRECTIVE = re.compile(r"^#(?:(?!SBATCH)[Ss][Bb][Aa][Tt][Cc][Hh]|\s+SBATCH)\s+-")
HEREDOC = re.compile(r"<<-?\s*['\"]?([A-Za-z_][A-Za-z0-9_]*)['\"]?")


@dataclass(frozen=True)
class Directive:
    line_number: int
    text: str
    options: tuple[ParsedOption, ...]


@dataclass(frozen=True)
class IgnoredDirective:
    line_number: int
    text: str
    why: str


@dataclass(frozen=True)
class ScriptCommand:
    line_number: int
    text: str
    words: tuple[Word, ...]


@dataclass(frozen=True)
class ParsedScript:
    path: Path
    text: str
    directives: tuple[Directive, ...] = ()
    ignored_directives: tuple[IgnoredDirective, ...] = ()
    variables: dict[str, str] = field(default_factory=dict)  # simple assignments, expanded; last wins
    exported: frozenset[str] = frozenset()
    needs_shell: dict[str, str] = field(default_factory=dict)  # name -> why only a running shell knows it
    shell: ScriptShell | None = field(default=None, compare=False, repr=False)
    commands: tuple[ScriptCommand, ...] = ()
    launcher: LauncherLine | None = None
    other_launchers: tuple[LauncherLine, ...] = ()

    @property
    def directive_options(self) -> list[ParsedOption]:
        return [option for directive in self.directives for option in directive.options]


def read_script_text(path: Path) -> str:
    """The script's text; UsageError for missing, unreadable, empty, binary, huge or non-UTF-8 files."""
    try:
        if path.is_dir():
            raise UsageError(f"batch script {path} is a folder; give the script file")
        raw = read_bounded(path, MAX_SCRIPT_BYTES)  # a FIFO or a device put in its place never hangs the shim
    except UsageError:
        raise
    except FileNotFoundError:
        raise UsageError(f"batch script {path} does not exist; check the path") from None
    except TooLargeError as exc:
        raise UsageError(f"batch script {path} is {exc.size} bytes, over sbatch's 4 MB limit; is it the right file?") from None
    except OSError as exc:
        if exc.errno == errno.EINVAL:
            raise UsageError(f"batch script {path} is {exc.strerror}; give the script file") from None
        raise UsageError(f"cannot read batch script {path}: {exc.strerror or exc}; check its permissions") from None
    if len(raw) > MAX_SCRIPT_BYTES:
        raise UsageError(f"batch script {path} is {len(raw)} bytes, over sbatch's 4 MB limit; is it the right file?")
    if not raw.strip():
        raise UsageError(f"batch script {path} is empty; write the #! line, the #SBATCH lines and the launch command")
    if b"\0" in raw:
        raise UsageError(f"batch script {path} is a binary file, not a shell script; give the .sh file that launches it")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"batch script {path} is not UTF-8 text (byte {exc.start}); save it as UTF-8") from None


def parse_script(
    path: Path, env: Mapping[str, str] | None = None, args: Sequence[str] | None = None,
    job_env: Mapping[str, str] | None = None, opaque_env: str = "",
) -> ParsedScript:
    """`args`: the script's real arguments, so `"$@"`, `$1`, `$#` on its lines expand as bash would;
    `job_env`: the SLURM_* values the job will be given that are known before it is submitted; `opaque_env`:
    why the job's environment may hold more than `env` (e.g. --export=NONE loads the user's login environment)."""
    return parse_script_text(read_script_text(path), path, env, args, job_env, opaque_env)


def parse_wrap(command: str, env: Mapping[str, str] | None = None) -> ParsedScript:
    """`--wrap "cmd"`: sbatch makes a script `#!/bin/sh` + the command."""
    return parse_script_text(f"#!/bin/sh\n{command}\n", Path("--wrap"), env)


def parse_script_text(
    text: str, path: Path, env: Mapping[str, str] | None = None, args: Sequence[str] | None = None,
    job_env: Mapping[str, str] | None = None, opaque_env: str = "",
) -> ParsedScript:
    _refuse_unreadable(text, path)
    lines = text.split("\n")
    scan = scan_directives(text, path)
    directives = [Directive(d.line_number, d.text, d.options) for d in scan.lines if d.options]
    ignored = [IgnoredDirective(number, line, why) for number, line, why in scan.skipped]
    ignored += [
        IgnoredDirective(number, lines[number - 1], "#SLURM is sbatch's old spelling: it applies it; write #SBATCH")
        for number in scan.slurm_magic_lines
    ]
    header_end = scan.hetjob_line or scan.first_command_line or len(lines) + 1
    shell = ScriptShell(env or {}, args, job_env or {}, lines[0] if lines else "", opaque_env)
    commands: list[ScriptCommand] = []
    launchers: list[LauncherLine] = []
    heredoc_end: str | None = None
    for line_number, line in _logical_lines(lines):
        stripped = line.strip()
        if heredoc_end is not None:
            if stripped == heredoc_end:
                heredoc_end = None
            continue
        if line_number == 1 or not stripped:
            continue
        if stripped.startswith("#"):
            comment = _ignored_comment(line_number, line, header_end, scan.hetjob_line)
            ignored += [comment] if comment else []
            continue
        heredoc = HEREDOC.search(line)
        if heredoc:
            heredoc_end = heredoc.group(1)
        line_commands = _line_commands(shell, line, line_number, path)
        commands += line_commands
        launchers += _launchers(line_commands)
    return ParsedScript(
        path=path,
        text=text,
        directives=tuple(directives),
        ignored_directives=tuple(sorted(ignored, key=lambda item: item.line_number)),
        variables=dict(shell.variables),
        exported=frozenset(shell.exported),
        needs_shell=dict(shell.needs_shell),
        shell=shell,
        commands=tuple(commands),
        launcher=launchers[0] if launchers else None,
        other_launchers=tuple(launchers[1:]),
    )


def _refuse_unreadable(text: str, path: Path) -> None:
    """What sbatch refuses before reading a directive: no `#!` line, DOS line breaks."""
    if not text.startswith("#!"):
        raise UsageError(
            f"{path} line 1 must start with #! and an interpreter (e.g. #!/bin/bash); sbatch refuses it otherwise"
        )
    if "\r\n" in text:
        first_dos = text[: text.index("\r\n")].count("\n") + 1
        raise UsageError(
            f"{path} has DOS line breaks (\\r\\n, first on line {first_dos}); sbatch refuses it: convert it with "
            f"`dos2unix {path}`"
        )


def _ignored_comment(line_number: int, line: str, header_end: int, hetjob_line: int | None) -> IgnoredDirective | None:
    """A comment line that looks like a directive sbatch does not apply, with why; None for a plain comment or
    a directive sbatch reads."""
    stripped = line.strip()
    if not DIRECTIVE.match(stripped):
        if NEAR_DIRECTIVE.match(stripped):
            return IgnoredDirective(line_number, stripped, "not spelled exactly '#SBATCH': sbatch ignores it")
        return None
    if line_number >= header_end:
        why = "after the first command: sbatch ignores it"
        if hetjob_line:
            why = "from '#SBATCH hetjob' on: another job component (the pre-flight judges the first)"
        return IgnoredDirective(line_number, stripped, why)
    if not line.startswith("#SBATCH"):
        return IgnoredDirective(line_number, stripped, "indented: sbatch reads only #SBATCH at column 0")
    return None


def _line_commands(shell: ScriptShell, line: str, line_number: int, path: Path) -> list[ScriptCommand]:
    """The simple commands of one logical line, expanded with what the lines before set."""
    try:
        simple_commands = [spread_all_args(words, shell.args) for words in shell.read_line(line, line_number)]
    except ShellSyntaxError as exc:
        raise UsageError(f"{path} line {line_number}: {exc}; bash would fail on it too") from None
    return [ScriptCommand(line_number, line.strip(), tuple(words)) for words in simple_commands]


def _launchers(commands: list[ScriptCommand]) -> list[LauncherLine]:
    found = (detect_launcher(list(command.words), command.line_number, command.text) for command in commands)
    return [launcher for launcher in found if launcher is not None]


def _logical_lines(lines: list[str]) -> list[tuple[int, str]]:
    """Join backslash-continued lines; each keeps the number of its first physical line."""
    joined: list[tuple[int, str]] = []
    buffer = ""
    start = 0
    for number, line in enumerate(lines, start=1):
        if not buffer:
            start = number
        if line.endswith("\\") and not line.endswith("\\\\") and not line.lstrip().startswith("#"):
            buffer += line[:-1] + " "
            continue
        joined.append((start, buffer + line))
        buffer = ""
    if buffer:
        joined.append((start, buffer))
    return joined
