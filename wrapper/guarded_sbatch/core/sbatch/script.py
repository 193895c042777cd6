"""Read a batch script: its #SBATCH lines (as sbatch reads them), its plain variables and its launcher line.

Nothing here runs a shell: lines are split by shell_words, variables are only those the script assigns
plainly (`DATA=/scratch/x`, `export WANDB_PROJECT=coco`) plus the environment.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from guarded_sbatch.core.errors import UsageError
from guarded_sbatch.core.sbatch.argv import ParsedOption
from guarded_sbatch.core.sbatch.directives import scan_directives
from guarded_sbatch.core.sbatch.launcher import LauncherLine, detect_launcher
from guarded_sbatch.core.sbatch.shell_words import ShellSyntaxError, Word, split_commands

MAX_SCRIPT_BYTES = 4 * 1024 * 1024  # sbatch itself refuses scripts over 4 MB
DIRECTIVE = re.compile(r"^#SBATCH(?:\s|$)")
# `#sbatch -p x`, `#Sbatch`, `# SBATCH --x`: look like directives, but sbatch ignores them (`##SBATCH` is the
# usual way to switch one off on purpose and is not reported)
NEAR_DIRECTIVE = re.compile(r"^#(?:(?!SBATCH)[Ss][Bb][Aa][Tt][Cc][Hh]|\s+SBATCH)\s+-")
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
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
    variables: dict[str, str] = field(default_factory=dict)  # plain assignments, in order, last wins
    exported: frozenset[str] = frozenset()
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
        raw = path.read_bytes()
    except UsageError:
        raise
    except FileNotFoundError:
        raise UsageError(f"batch script {path} does not exist; check the path") from None
    except OSError as exc:
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


def parse_script(path: Path, env: Mapping[str, str] | None = None, args: Sequence[str] | None = None) -> ParsedScript:
    """`args`: the script's real arguments, so `"$@"`, `$1`, `$#` on its lines expand as bash would."""
    return parse_script_text(read_script_text(path), path, env, args)


def parse_wrap(command: str, env: Mapping[str, str] | None = None) -> ParsedScript:
    """`--wrap "cmd"`: sbatch makes a script `#!/bin/sh` + the command."""
    return parse_script_text(f"#!/bin/sh\n{command}\n", Path("--wrap"), env)


def parse_script_text(
    text: str, path: Path, env: Mapping[str, str] | None = None, args: Sequence[str] | None = None
) -> ParsedScript:
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
    lines = text.split("\n")
    scan = scan_directives(text, path)
    directives = [Directive(d.line_number, d.text, d.options) for d in scan.lines if d.options]
    ignored = [IgnoredDirective(number, line, why) for number, line, why in scan.skipped]
    ignored += [
        IgnoredDirective(number, lines[number - 1], "#SLURM is sbatch's old spelling: it applies it; write #SBATCH")
        for number in scan.slurm_magic_lines
    ]
    header_end = scan.hetjob_line or scan.first_command_line or len(lines) + 1
    variables: dict[str, str] = {}
    exported: set[str] = set()
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
            if DIRECTIVE.match(stripped):
                if line_number >= header_end:
                    why = "after the first command: sbatch ignores it"
                    if scan.hetjob_line:
                        why = "from '#SBATCH hetjob' on: another job component (the pre-flight judges the first)"
                    ignored.append(IgnoredDirective(line_number, stripped, why))
                elif not line.startswith("#SBATCH"):
                    ignored.append(IgnoredDirective(line_number, stripped, "indented: sbatch reads only #SBATCH at column 0"))
            elif NEAR_DIRECTIVE.match(stripped):
                ignored.append(IgnoredDirective(line_number, stripped, "not spelled exactly '#SBATCH': sbatch ignores it"))
            continue
        heredoc = HEREDOC.search(line)
        if heredoc:
            heredoc_end = heredoc.group(1)
        known = {**(env or {}), **variables, **_positional(args)}
        try:
            simple_commands = [_spread_all_args(words, args) for words in split_commands(line, known)]
        except ShellSyntaxError as exc:
            raise UsageError(f"{path} line {line_number}: {exc}; bash would fail on it too") from None
        for words in simple_commands:
            if _record_assignments(words, variables, exported):
                continue
            commands.append(ScriptCommand(line_number, stripped, tuple(words)))
            launcher = detect_launcher(words, line_number, stripped)
            if launcher is not None:
                launchers.append(launcher)
    return ParsedScript(
        path=path,
        text=text,
        directives=tuple(directives),
        ignored_directives=tuple(sorted(ignored, key=lambda item: item.line_number)),
        variables=variables,
        exported=frozenset(exported),
        commands=tuple(commands),
        launcher=launchers[0] if launchers else None,
        other_launchers=tuple(launchers[1:]),
    )


_ALL_ARGS = "\0guarded-sbatch:all-args\0"


def _positional(args: Sequence[str] | None) -> dict[str, str]:
    """$1.., $#, and a marker for "$@" / $* (spread into words by _spread_all_args); nothing when the
    arguments are not known, so those words stay unresolved."""
    if args is None:
        return {}
    values = {str(index): value for index, value in enumerate(args, start=1)}
    values.update({"#": str(len(args)), "@": _ALL_ARGS, "*": _ALL_ARGS})
    return values


def _spread_all_args(words: list[Word], args: Sequence[str] | None) -> list[Word]:
    if args is None or not any(_ALL_ARGS in word.text for word in words):
        return words
    spread: list[Word] = []
    for word in words:
        if word.text == _ALL_ARGS:
            spread.extend(Word(arg) for arg in args)
        elif _ALL_ARGS in word.text:  # `--x="$@"`: joined, as "$*" would be
            spread.append(Word(word.text.replace(_ALL_ARGS, " ".join(args)), word.unresolved))
        else:
            spread.append(word)
    return spread


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


MAX_VARIABLE_CHARS = 64 * 1024


def _record_assignments(words: list[Word], variables: dict[str, str], exported: set[str]) -> bool:
    """Handle `A=1 B=2`, `export A=1`, `export A`; True when the command was only assignments."""
    items = words
    is_export = False
    if items and items[0].text in ("export", "declare", "local", "readonly"):
        is_export = items[0].text == "export"
        items = [word for word in items[1:] if not word.text.startswith("-")]
        if not items:
            return True
        if not all(ASSIGNMENT.match(word.text) or re.match(r"^[A-Za-z_]\w*$", word.text) for word in items):
            return False
    elif not items or not all(ASSIGNMENT.match(word.text) for word in items):
        return False
    for word in items:
        name, has_value, value = word.text.partition("=")
        if has_value:
            if word.unresolved or len(value) > MAX_VARIABLE_CHARS:
                # needs a shell, or grows without bound (A="$A$A" line after line): later uses stay unresolved
                variables.pop(name, None)
            else:
                variables[name] = value
        if is_export:
            exported.add(name)
    return True
