"""Enforcement fails closed: a line the launcher rule (site/enforcement.py) cannot classify, but that could start a
launcher, is a training launch. The Lua twin is lib.unclassified_launch in lua/guarded_sbatch_lib.lua; both read the
script's text the same simple way, so the shim and the Slurm plugins agree (tests/test_site_launch_forms.py).

The line is read as bash would join and unquote it, roughly: a backslash-newline is removed (`pyt\\` + `hon` is
`python`), backslashes and quotes are dropped (`\\python`, `"python"`), and the line is cut into commands at
`; & | ( ) { }` and backquotes (so `case x in x) python t.py;; esac`, `(python t.py)` and `$(python t.py)` each
hold a plain `python t.py`). In each command, words that run the rest of it (`exec -a NAME`, `time -p`,
`env -i A=1`, `nohup`, `nice -n 5`, `bash -c`, `eval`, `xargs`, `sudo` ...) are looked through: a launcher after
them counts. A command word that is a variable (`$PYTHON t.py`, `${RUN} train.py`) counts when it names Python or
runs a `.py` file. Still untouched: `python -c` (inline code), exempt programs, and words that merely mention Python
(`echo python is great`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# words that run the rest of their command; the options of theirs that take a value (the value is skipped too)
RUNS_ARGUMENTS: dict[str, frozenset[str]] = {
    "exec": frozenset({"-a"}), "time": frozenset({"-f", "-o", "--format", "--output"}), "nohup": frozenset(),
    "command": frozenset(), "builtin": frozenset(), "env": frozenset({"-u", "-C", "--unset", "--chdir", "-S"}),
    "stdbuf": frozenset({"-i", "-o", "-e"}), "nice": frozenset({"-n"}), "ionice": frozenset({"-c", "-n", "-p"}),
    "setsid": frozenset(), "chrt": frozenset(), "eval": frozenset(), "bash": frozenset(), "sh": frozenset(),
    "zsh": frozenset(), "dash": frozenset(), "ksh": frozenset(), "xargs": frozenset(), "parallel": frozenset(),
    "sudo": frozenset({"-u", "-g"}), "su": frozenset(), "runuser": frozenset({"-u"}), "flock": frozenset(),
    "watch": frozenset({"-n"}), "unbuffer": frozenset(), "strace": frozenset({"-o", "-e", "-p"}),
    "valgrind": frozenset(), "nsys": frozenset(), "ncu": frozenset(), "perf": frozenset(), "gdb": frozenset(),
    "catchsegv": frozenset(), "srun": frozenset(), "mpirun": frozenset(), "mpiexec": frozenset(),
    "timeout": frozenset(), "singularity": frozenset(), "apptainer": frozenset(), "enroot": frozenset(),
    "podman": frozenset(), "docker": frozenset(), "numactl": frozenset(), "taskset": frozenset(),
    "do": frozenset(), "then": frozenset(), "else": frozenset(), "elif": frozenset(), "if": frozenset(),
    "while": frozenset(), "until": frozenset(), "!": frozenset(), "coproc": frozenset(),
}
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_PYTHON = re.compile(r"^python[0-9.]*$")
_NAMES_PYTHON = re.compile(r"py|torch|accel|deepspeed", re.IGNORECASE)
_HEREDOC = re.compile(r"<<-?\s*[\"']?([A-Za-z_][A-Za-z0-9_]*)")
_CUT = re.compile(r"[;&|(){}`]")


def _base(word: str) -> str:
    return word.rsplit("/", 1)[-1]


def launcher_kind(words: Sequence[str], at: int) -> tuple[str, list[str]] | None:
    """(kind, the words after it) when words[at] names a launcher (`python3.11`, `torchrun`, `deepspeed`,
    `accelerate launch`), else None. Shared with enforcement.wrapped_launcher (Lua twin: launcher_kind)."""
    base = _base(words[at])
    rest = list(words[at + 1:])
    if _PYTHON.match(base):
        return "python", rest
    if base in ("torchrun", "deepspeed"):
        return base, rest
    if base == "accelerate" and rest[:1] == ["launch"]:
        return "accelerate", rest[1:]
    return None


def _launcher_at(words: Sequence[str], at: int) -> tuple[str, str] | None:
    """(kind, program) when words[at] starts a launcher, else None (`python -c` is inline code: None)."""
    found = launcher_kind(words, at)
    if found is None:
        return None
    kind, rest = found
    for index, word in enumerate(rest):
        if kind == "python" and word == "-c":
            return None
        if kind == "python" and word == "-m":
            return kind, rest[index + 1] if index + 1 < len(rest) else ""
        if not word.startswith("-"):
            return kind, word
    return kind, ""


def _command_launcher(words: Sequence[str]) -> tuple[str, str] | None:
    """The launcher this command (already cut and unquoted) may start, looking through the words that run the rest."""
    index, runner = 0, False
    while index < len(words):
        word = words[index]
        base = _base(word)
        if _ASSIGNMENT.match(word):
            index += 1
        elif base in RUNS_ARGUMENTS:
            runner, index = True, _skip_options(words, index + 1, RUNS_ARGUMENTS[base])
        else:
            break
    if index >= len(words):
        return None
    found = _launcher_at(words, index)
    if found is not None or not runner and "$" not in words[index]:
        return found
    if "$" in words[index]:  # the command is a variable: a launcher when it names one or runs a .py file
        if _NAMES_PYTHON.search(words[index]) or any(word.endswith(".py") for word in words[index + 1:]):
            return "python", next((w for w in words[index + 1:] if not w.startswith("-")), "")
        return None
    for at in range(index, len(words)):  # behind a runner whose own options are unknown: a launcher anywhere
        found = _launcher_at(words, at)
        if found is not None or _PYTHON.match(_base(words[at])):
            return found  # the first Python word decides: `bash -c python -c ...` is inline code
    return None


def _skip_options(words: Sequence[str], index: int, takes_value: frozenset[str]) -> int:
    while index < len(words) and words[index].startswith("-") and words[index] != "-":
        index += 2 if words[index] in takes_value else 1
    return index


def _lines(text: str) -> list[tuple[int, str]]:
    """(first line number, text) of each line as bash joins them: a backslash-newline is removed."""
    joined: list[tuple[int, str]] = []
    buffer, start = "", 0
    for number, line in enumerate(text.split("\n"), 1):
        line = line.removesuffix("\r")
        if not buffer:
            start = number
        if line.endswith("\\") and not line.lstrip().startswith("#"):
            buffer += line[:-1]
        else:
            joined.append((start, buffer + line))
            buffer = ""
    return joined


def unclassified_launch(text: str, launchers: Sequence[str], exempt: Sequence[str]) -> str | None:
    """"line N: <text>" of the first line that may start a launcher of `launchers` (programs in `exempt` aside),
    read the fail-closed way above; None when none may."""
    heredoc_end = None
    for index, (number, line) in enumerate(_lines(text)):
        stripped = line.strip()
        if heredoc_end is not None:
            heredoc_end = None if stripped == heredoc_end else heredoc_end
            continue
        if index == 0 or not stripped or stripped.startswith("#"):
            continue
        match = _HEREDOC.search(line)
        heredoc_end = match.group(1) if match else None
        code = re.sub(r"\s#.*$", "", stripped).replace("\\", "").replace('"', "").replace("'", "")
        for command in _CUT.split(code):
            found = _command_launcher(command.split())
            if found is not None and found[0] in launchers and not is_exempt(found[1], exempt):
                return f"line {number}: {stripped}"
    return None


def is_exempt(program: str, exempt: Sequence[str]) -> bool:
    """`guarded_sbatch` exempts guarded_sbatch and guarded_sbatch.x; `prep.py` exempts any .../prep.py."""
    base = _base(program)
    return any(program == entry or program.startswith(entry + ".") or base == entry for entry in exempt)
