"""#SBATCH lines exactly as sbatch 22.05 reads them (src/sbatch/opt.c: _opt_batch_script and get_argument).

sbatch reads physical lines from the top. A line starting (at column 0) with `#SBATCH` (or the old `#SLURM`)
adds its words to one argument list; any other line whose first non-blank character is not `#` is the first
command and ends the reading; blank and comment lines (an indented `  #SBATCH` is a comment) are skipped. A
line whose first word is `hetjob` (or `packjob`) starts the next component of a heterogeneous job: the first
component (the one the pre-flight judges) ends there. Words: quotes group (and may sit mid-word), a backslash
keeps the next character, an unquoted `#` ends the line, a word may not start with `:`. The words from all
lines are then parsed as one getopt_long argument list, so `#SBATCH -t` + `#SBATCH 10` sets the time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from guarded_sbatch.core.errors import UsageError
from guarded_sbatch.sbatch.argv import ParsedOption, parse_one_option
from guarded_sbatch.sbatch.spec import EARLY_PASS_OPTIONS

C_SPACE = " \t\n\v\f\r"
_SEPARATOR = re.compile(r"(?i)(packjob|hetjob)(?=[ \t\n\v\f\r]|$)")


@dataclass(frozen=True)
class DirectiveLine:
    line_number: int
    text: str
    options: tuple[ParsedOption, ...]


@dataclass(frozen=True)
class DirectiveScan:
    lines: tuple[DirectiveLine, ...] = ()
    first_command_line: int | None = None  # the line that ended the reading (None: the script has no command)
    hetjob_line: int | None = None  # the separator that ended the first component
    skipped: tuple[tuple[int, str, str], ...] = ()  # (line, text, why) read by sbatch but without effect
    slurm_magic_lines: tuple[int, ...] = field(default=())


def scan_directives(text: str, path: Path | str) -> DirectiveScan:
    words: list[tuple[str, int]] = []
    line_texts: dict[int, str] = {}
    first_command: int | None = None
    hetjob_line: int | None = None
    slurm_magic: list[int] = []
    for line_number, line in enumerate(text.split("\n"), start=1):
        if line.startswith("#SBATCH"):
            body = line[len("#SBATCH") :]
        elif line.startswith("#SLURM"):
            body = line[len("#SLURM") :]
            slurm_magic.append(line_number)
        else:
            stripped = line.lstrip(C_SPACE)
            if stripped and not stripped.startswith("#"):
                first_command = line_number
                break
            continue
        if _SEPARATOR.match(body.lstrip(C_SPACE)):
            hetjob_line = line_number
            break
        line_texts[line_number] = line
        words.extend((word, line_number) for word in _line_words(body, path, line_number, line))
    options_by_line, skipped = _parse_words(words, path)
    lines = tuple(
        DirectiveLine(number, line_texts[number], tuple(options_by_line.get(number, ()))) for number in line_texts
    )
    return DirectiveScan(lines, first_command, hetjob_line, tuple(skipped), tuple(slurm_magic))


def _line_words(body: str, path: Path | str, line_number: int, line: str) -> list[str]:
    """get_argument, called until it returns nothing."""
    words: list[str] = []
    pos = 0
    while True:
        while pos < len(body) and body[pos] in C_SPACE:
            pos += 1
        separator = _SEPARATOR.match(body, pos)
        if separator:  # sbatch blanks a later `hetjob` word, which also ends the line's reading
            return words
        if body.startswith(":", pos):
            raise UsageError(
                f"{path} line {line_number}: sbatch refuses a word starting with ':' in {line!r}; "
                "write heterogeneous job components as '#SBATCH hetjob' lines"
            )
        word, pos, open_quote = _read_word(body, pos)
        if open_quote:
            raise UsageError(f"{path} line {line_number}: unmatched {open_quote} in {line!r}; sbatch refuses the script")
        if not word:  # nothing read (a comment, an empty quote pair, a lone backslash): the line ends here
            return words
        words.append(word)


def _read_word(body: str, pos: int) -> tuple[str, int, str]:
    """One word from body[pos:] up to a blank or an unquoted `#`: (its characters, where the reading stopped,
    the quote left open or "")."""
    chars: list[str] = []
    quote = ""
    escaped = False
    while pos < len(body) and (quote or body[pos] not in C_SPACE):
        char = body[pos]
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
            pos += 1
            continue
        elif quote:
            if char == quote:
                quote = ""
                pos += 1
                continue
        elif char in "\"'":
            quote = char
            pos += 1
            continue
        elif char == "#":
            break
        chars.append(char)
        pos += 1
    return "".join(chars), pos, quote


def _parse_words(
    words: list[tuple[str, int]], path: Path | str
) -> tuple[dict[int, list[ParsedOption]], list[tuple[int, str, str]]]:
    texts = [word for word, _ in words]
    by_line: dict[int, list[ParsedOption]] = {}
    skipped: list[tuple[int, str, str]] = []
    index = 0
    while index < len(texts):
        word, line_number = words[index]
        where = f"{path} line {line_number}"
        if word == "--":
            index += 1
            break
        if not word.startswith("-") or word == "-":
            break
        options, index = parse_one_option(texts, index, where)
        for option in options:
            if option.name in EARLY_PASS_OPTIONS:
                skipped.append((line_number, " ".join(option.words), f"sbatch reads --{option.name} only from its command line"))
            else:
                by_line.setdefault(line_number, []).append(option)
    if index < len(texts):
        word, line_number = words[index]
        raise UsageError(
            f"{path} line {line_number}: {word!r} is not an sbatch option; sbatch refuses the script "
            "(\"Invalid directive\"). Write '#SBATCH --name=value', one or more options per line"
        )
    return by_line, skipped
