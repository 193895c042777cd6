"""What bash would know of a batch script's variables, line by line, without running it.

The script's own simple assignments before the launcher line (`VAR=value`, `VAR="$1"`, `VAR=${1:-x.yaml}`,
`: "${VAR:=x}"`, `export VAR=...`, concatenations) are expanded with its real arguments and the job's
variables. SLURM_JOB_ID / SLURM_JOBID / SLURM_JOB_NAME are set by the job itself: they stay symbolic
(`${SLURM_JOB_ID}`) until the job exists. Whatever only a running shell can know stays unknown, with the reason
kept for the report: a value from `$(...)`, an assignment inside `if`/`case`/a loop/a function or after `&&`,
`read`, and, after `source`/`module load`/`eval`, any name the script did not set itself.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from guarded_sbatch.sbatch.shell_words import Scope, Word, next_command

JOB_SYMBOLIC = frozenset({"SLURM_JOB_ID", "SLURM_JOBID", "SLURM_JOB_NAME"})
JOB_VARIABLE = re.compile(r"\$(?:\{(SLURM_JOB_ID|SLURM_JOBID|SLURM_JOB_NAME)\}|(SLURM_JOB_ID|SLURM_JOBID|SLURM_JOB_NAME)\b)")
# an array task's own id and its array's: set by the job only when it is a task of an array, symbolic then
ARRAY_VARIABLE = re.compile(r"\$(?:\{(SLURM_ARRAY_TASK_ID|SLURM_ARRAY_JOB_ID)\}|(SLURM_ARRAY_TASK_ID|SLURM_ARRAY_JOB_ID)\b)")
ARRAY_JOB_ENV = {"SLURM_ARRAY_TASK_ID": "${SLURM_ARRAY_TASK_ID}", "SLURM_ARRAY_JOB_ID": "${SLURM_ARRAY_JOB_ID}"}
ALL_ARGS = "\0guarded-sbatch:all-args\0"
MAX_VARIABLE_CHARS = 64 * 1024
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\+?=")
ARRAY_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\+?=\(")
ARITHMETIC = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\s*(?:[-+*/%]?=|\+\+|--)")
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
OPENERS = {"if": "an if block", "while": "a while loop", "until": "an until loop", "for": "a for loop",
           "case": "a case block", "select": "a select loop"}
CLOSERS = {"fi", "done", "esac"}
LEADING_KEYWORDS = {"then", "do", "else", "elif", "!"}
CONDITIONAL_OPERATORS = {"&&", "||", "|", "|&", "&"}
# commands after which any variable may hold anything (the script did not set it, but they may have)
READING_COMMANDS = {"read", "getopts", "mapfile", "readarray"}  # give their names values only a run knows
OPAQUE_COMMANDS = {"source", ".", "eval", "module", "ml", "conda", "mamba", "micromamba", "spack"}
LOGIN_SHEBANG = re.compile(r"^#!\S*(?:\s+\S+)*\s+(?:-\w*l\w*|--login)\b")


class ScriptShell:
    """The variables of one script as its lines are read in order."""

    def __init__(self, env: Mapping[str, str], args: Sequence[str] | None, job_env: Mapping[str, str],
                 first_line: str = "", opaque: str = "") -> None:
        # the job's own SLURM_* values replace the submitting shell's (which may be another job's)
        self.env = {k: v for k, v in env.items() if not k.startswith(("SLURM_", "SLURMD_"))} | dict(job_env)
        self.args: list[str] | None = list(args) if args is not None else None
        self.variables: dict[str, str] = {}
        self.exported: set[str] = set()
        self.needs_shell: dict[str, str] = {}  # name -> why only a running shell knows its value
        self.unset: set[str] = set()
        login = "a login shell (#! ... -l) reads the user's profile" if LOGIN_SHEBANG.match(first_line) else ""
        self.opaque = opaque or login  # why a name the script did not set may still be set in the job
        self.depth = 0
        self.block = ""  # the outermost open block, for the reason

    def known(self) -> dict[str, str]:
        values = {**self.env, **self.variables, **self._positional()}
        for name in (*self.needs_shell, *self.unset):
            values.pop(name, None)
        return values

    def scope(self) -> Scope:
        return Scope(is_unset=self._is_unset, symbolic=JOB_SYMBOLIC - set(self.needs_shell) - set(self.env))

    def _is_unset(self, name: str) -> bool:
        if name in self.needs_shell:
            return False
        if name in self.unset:
            return True
        if name.isdigit():
            return self.args is not None
        if not NAME.match(name) or name.startswith(("SLURM_", "SLURMD_")):
            return False  # set or not by Slurm, depending on the job
        return not self.opaque

    def _positional(self) -> dict[str, str]:
        """$1.., $#, and a marker for "$@" / $* (spread into words by spread_all_args); nothing when the
        arguments are not known, so those words stay unresolved."""
        if self.args is None:
            return {}
        values = {str(index): value for index, value in enumerate(self.args, start=1)}
        values.update({"#": str(len(self.args)), "@": ALL_ARGS, "*": ALL_ARGS})
        return values

    def read_line(self, line: str, line_number: int) -> list[list[Word]]:
        """The line's commands that are not plain assignments (assignments are recorded here), each expanded
        with what the commands before it set."""
        out: list[list[Word]] = []
        before = ""
        position = 0
        while position < len(line):
            scope = self.scope()
            items, used = next_command(line[position:], self.known(), scope)
            position += used
            words = [item for item in items if isinstance(item, Word)]
            after = next((item for item in items if isinstance(item, str)), "")
            if words:
                conditional = self.depth > 0 or before in CONDITIONAL_OPERATORS or after in CONDITIONAL_OPERATORS
                where = self.block or f"a command joined by {after if after in CONDITIONAL_OPERATORS else before}"
                if not self._assignments(words, line_number, where if conditional else ""):
                    self._special(words, line_number, where if conditional else "")
                    out.append(words)
            for name, value in scope.assigned.items():  # `: "${VAR:=default}"`
                self._set(name, value, line_number, self.block if self.depth else "")
            if after in ("{", "("):
                self._open(line_number, "a { } group or a function" if after == "{" else "a ( ) subshell")
            elif after in ("}", ")"):
                self._close()
            before = after or before
        return out

    def _open(self, line_number: int, what: str) -> None:
        if self.depth == 0:
            self.block = f"{what} (from line {line_number})"
        self.depth += 1

    def _close(self) -> None:
        self.depth = max(0, self.depth - 1)
        if self.depth == 0:
            self.block = ""

    def _set(self, name: str, value: str, line_number: int, conditional: str, *, dirty: bool = False) -> None:
        self.unset.discard(name)
        if conditional:
            self.variables.pop(name, None)
            self.needs_shell[name] = f"{name} is set inside {conditional}, line {line_number}"
        elif dirty or len(value) > MAX_VARIABLE_CHARS:
            # needs a shell, or grows without bound (A="$A$A" line after line): later uses stay unresolved
            inner = "; ".join(self.why_unresolved(value)) if dirty else "too long to follow"
            self.variables.pop(name, None)
            self.needs_shell[name] = (f"{name} is set on line {line_number} from {value[:80]!r}, "
                                      f"{f'where {inner}' if inner else 'which needs a shell'}")
        else:
            self.variables[name] = value
            self.needs_shell.pop(name, None)

    def _assignments(self, words: list[Word], line_number: int, conditional: str) -> bool:
        """Handle `A=1 B=2`, `export A=1`, `export A`; True when the command was only assignments."""
        items = list(words)
        while items and (items[0].text in LEADING_KEYWORDS or self.depth and items[0].text.endswith(")")):
            items = items[1:]  # `then`, `do`, a case pattern `big)`
        is_export = False
        if items and items[0].text in ("export", "declare", "local", "readonly", "typeset"):
            is_export = items[0].text == "export"
            items = [word for word in items[1:] if not word.text.startswith("-")]
            if not items:
                return True
            if not all(ASSIGNMENT.match(word.text) or NAME.match(word.text) for word in items):
                return False
        elif not items or not all(ASSIGNMENT.match(word.text) for word in items):
            return False
        for word in items:
            if ARRAY_ASSIGNMENT.match(word.text):
                return False  # `A=(x y)` splits into several words: _special marks it
            name, has_value, value = word.text.partition("=")
            dirty = word.unresolved
            if name.endswith("+"):  # `A+=x` appends
                name = name[:-1]
                before = self.known().get(name)
                if before is None and not self._is_unset(name):
                    dirty, value = True, f"${name}{value}"
                value = (before or "") + value
            if has_value:
                self._set(name, value, line_number, conditional, dirty=dirty)
            if is_export:
                self.exported.add(name)
        return True

    def _special(self, words: list[Word], line_number: int, conditional: str) -> None:
        """Commands that change what later lines see: blocks, shift, set --, read, unset, source, module."""
        index = 0
        while index < len(words) and words[index].text in LEADING_KEYWORDS:
            index += 1
        if index >= len(words):
            return
        head, rest = words[index].text, words[index + 1 :]
        condition = rest if head in ("if", "while", "until") else (words[index:] if index else [])
        if self._not_followed(head, rest, condition, line_number):
            return
        if head in CLOSERS:
            self._close()
        elif head in OPENERS:
            self._open(line_number, OPENERS[head])
            if head in ("for", "select") and rest and NAME.match(rest[0].text):
                self._set(rest[0].text, "", line_number, self.block)
        elif head == "shift":
            self._shift(rest, conditional)
        elif head == "set" and any(w.text == "--" for w in rest):
            after = rest[[w.text for w in rest].index("--") + 1 :]
            clean = not conditional and not any(w.unresolved for w in after)
            self.args = [w.text for w in after] if clean else None
        elif head in READING_COMMANDS or (head == "printf" and [w.text for w in rest[:1]] == ["-v"]):
            self._mark_read(head, rest, line_number)
        elif head == "unset":
            self._unset(rest, line_number, conditional)
        elif head in OPAQUE_COMMANDS and not self.opaque:
            self.opaque = f"`{head}` on line {line_number} may set any variable"

    def _shift(self, rest: list[Word], conditional: str) -> None:
        """`shift [n]`: the arguments move when n is known and the shift always runs, else they become unknown."""
        count = rest[0].text if rest else "1"
        if self.args is not None and not conditional and count.isdigit() and not (rest and rest[0].unresolved):
            self.args = self.args[int(count):]
        else:
            self.args = None

    def _mark_read(self, head: str, rest: list[Word], line_number: int) -> None:
        """`read X`, `getopts spec X`, `mapfile X`, `printf -v X`: the names get values only a run knows."""
        names = [w.text for w in rest if NAME.match(w.text)]
        if head == "getopts":
            names = names[1:2]
        for name in names:
            self._set(name, "", line_number, f"`{head}` (its value is read when the script runs)")

    def _unset(self, rest: list[Word], line_number: int, conditional: str) -> None:
        for word in rest:
            if not NAME.match(word.text):
                continue
            if conditional:
                self._set(word.text, "", line_number, conditional)
            else:
                self.variables.pop(word.text, None)
                self.unset.add(word.text)

    def _not_followed(self, head: str, rest: list[Word], condition: list[Word], line_number: int) -> bool:
        """Assignments in a condition, arrays, arithmetic: their names become unknown, never a stale value.
        True when the command was one of these (nothing more to do)."""
        for word in condition:  # `if CONFIG=x; then`, `elif X=1 cmd`
            if not ASSIGNMENT.match(word.text):
                break
            self._set(word.text.split("=", 1)[0].rstrip("+"), "", line_number, "the condition of a block")
        array = ARRAY_ASSIGNMENT.match(head)
        if array:
            self._set(array.group(1), "", line_number, "an array assignment (arrays are not followed)")
            return True
        if head == "let":
            for word in rest:
                arithmetic = ARITHMETIC.match(word.text)
                if arithmetic:
                    self._set(arithmetic.group(1), "", line_number, "arithmetic (`let`)")
            return True
        return False

    def why_unresolved(self, text: str) -> list[str]:
        """For each `$NAME` in text that could not be expanded: why."""
        reasons: list[str] = []
        for match in re.finditer(r"\$\{?([A-Za-z_][A-Za-z0-9_]*|[0-9])", text):
            name = match.group(1)
            if name in self.needs_shell:
                reasons.append(self.needs_shell[name])
            elif name.isdigit() and self.args is None:
                reasons.append(f"${name} is a script argument, unknown here")
            elif self.opaque and not name.startswith("SLURM"):
                reasons.append(f"{name} is not set by the script itself, and {self.opaque}")
            elif name.startswith(("SLURM_", "SLURMD_")) and name not in JOB_SYMBOLIC:
                reasons.append(f"{name} is set by Slurm only for some jobs")
            elif self._is_unset(name) and not name.isdigit():
                reasons.append(f"{name} is not set before this line, by the script or the environment")
        return list(dict.fromkeys(reasons))


def fill_job_variables(text: str, *, job_id: str, job_name: str, array_job: str | None = None,
                       array_task: str | None = None) -> str:
    """`$SLURM_JOB_ID`, `${SLURM_JOBID}`, `$SLURM_JOB_NAME` in a recorded value, once the job exists; for a task
    of an array (array_job, array_task given) `$SLURM_ARRAY_JOB_ID` and `$SLURM_ARRAY_TASK_ID` too."""
    text = JOB_VARIABLE.sub(lambda m: job_name if (m.group(1) or m.group(2)) == "SLURM_JOB_NAME" else job_id, text)
    if array_job is None or array_task is None:
        return text
    return ARRAY_VARIABLE.sub(lambda m: array_task if (m.group(1) or m.group(2)) == "SLURM_ARRAY_TASK_ID"
                              else array_job, text)


def needs_shell(text: str, *, array: bool = False) -> bool:
    """Whether a value holds an expansion other than the job's own id and name (and, for a job array, its
    task's ids, which the script's variables carry symbolically when the launch gives them ARRAY_JOB_ENV)."""
    kept = JOB_VARIABLE.sub("", text)
    return "$" in (ARRAY_VARIABLE.sub("", kept) if array else kept) or "`" in text


def spread_all_args(words: list[Word], args: Sequence[str] | None) -> list[Word]:
    if args is None or not any(ALL_ARGS in word.text for word in words):
        return words
    spread: list[Word] = []
    for word in words:
        if word.text == ALL_ARGS:
            spread.extend(Word(arg) for arg in args)
        elif ALL_ARGS in word.text:  # `--x="$@"`: joined, as "$*" would be
            spread.append(Word(word.text.replace(ALL_ARGS, " ".join(args)), word.unresolved))
        else:
            spread.append(word)
    return spread
