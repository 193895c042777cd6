"""Split one logical line of a batch script into words and operators, the way bash would, without a shell.

Quotes, backslashes and comments follow bash. `$VAR` / `${VAR}` are expanded from the variables given
(the script's own plain assignments and the environment), and with a `Scope` also `${X:-y}`, `${X-y}`,
`${X:=y}`, `${X:+y}`, `${X:?y}`; anything that needs a shell to know its value (`$(...)`, backticks, unknown
variables, `${#X}`, `${X%y}`) leaves the word marked `unresolved`. Operators (`;`, `&&`, `||`, `|`, `&`) end
a command; redirections (`> f`, `2>&1`) are dropped with their target.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

OPERATORS = (";;", "&&", "||", "|&", ";", "|", "&")
VARIABLE = re.compile(r"\$(?P<plain>[A-Za-z_][A-Za-z0-9_]*|[0-9@*#?$!-])")
PARAMETER = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*|[0-9]+|[@*#?$!-])(?:(?P<op>:?[-=+?])(?P<word>.*))?$", re.S)


class ShellSyntaxError(ValueError):
    pass


def _never_unset(name: str) -> bool:
    return False


@dataclass
class Scope:
    """What an expansion may assume beyond the known values: which names bash would see unset (so
    `${X:-default}` takes its default), which are set by the job itself and stay symbolic (`${SLURM_JOB_ID}`,
    filled in once the job exists), and the assignments `${X:=y}` makes."""

    is_unset: Callable[[str], bool] = _never_unset
    symbolic: frozenset[str] = frozenset()
    assigned: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Word:
    text: str
    unresolved: bool = False  # its real value is only known when a shell runs it

    def __str__(self) -> str:
        return self.text


def next_command(line: str, variables: Mapping[str, str], scope: Scope | None = None) -> tuple[list[Word | str], int]:
    """The words up to and including the first operator (or the end), and where the rest of the line starts:
    a script's `A=1; echo $A` expands the second command with what the first one set."""
    return _tokenize(line, variables, scope)


@dataclass
class _Items:
    """The words and operators read so far, and the word being read."""

    items: list[Word | str] = field(default_factory=list)
    chars: list[str] = field(default_factory=list)
    unresolved: bool = False
    in_word: bool = False
    skip_next_word: bool = False  # the next word is a redirection's target

    def add(self, text: str, dirty: bool = False) -> None:
        self.chars.append(text)
        self.unresolved |= dirty
        self.in_word = True

    def finish_word(self) -> None:
        if self.in_word:
            if self.skip_next_word:
                self.skip_next_word = False
            else:
                self.items.append(Word("".join(self.chars), self.unresolved))
        self.chars, self.unresolved, self.in_word = [], False, False

    def drop_fd_digits(self) -> None:
        """`2>file`: the digits before a redirection are the fd, not a word."""
        text = "".join(self.chars)
        if self.in_word and text.isascii() and text.isdigit():
            self.chars, self.in_word = [], False


def _tokenize(line: str, known: Mapping[str, str], scope: Scope | None) -> tuple[list[Word | str], int]:
    read = _Items()
    position = 0
    length = len(line)
    while position < length:
        char = line[position]
        if char in " \t\r\n":
            read.finish_word()
            position += 1
        elif char == "#" and not read.in_word:
            break
        elif char in "\\'\"$`":
            position = _quoted_or_expanded(line, position, known, scope, read)
        elif char in "<>":
            read.drop_fd_digits()
            read.finish_word()
            position, read.skip_next_word = _redirection(line, position)
        elif any(line.startswith(op, position) for op in OPERATORS) or char in "(){}" and not read.in_word:
            position, ended = _operator(line, position, char, read)
            if ended:
                return read.items, position
        else:
            read.add(char)
            position += 1
    read.finish_word()
    return read.items, length


def _quoted_or_expanded(line: str, position: int, known: Mapping[str, str], scope: Scope | None, read: _Items) -> int:
    """A backslash, a quoted part or an expansion at line[position], added to the current word; returns the
    position after it."""
    char = line[position]
    if char == "\\":
        read.add(line[position + 1] if position + 1 < len(line) else "")
        return position + 2
    if char == "'":
        end = line.find("'", position + 1)
        if end < 0:
            raise ShellSyntaxError("unbalanced single quote")
        read.add(line[position + 1 : end])
        return end + 1
    if char == '"':
        position, text, dirty = _double_quoted(line, position + 1, known, scope)
    else:
        position, text, dirty = _dollar(line, position, known, scope)
    read.add(text, dirty)
    return position


def _operator(line: str, position: int, char: str, read: _Items) -> tuple[int, bool]:
    """The operator at line[position] ends the word; `&>` starts a redirection instead. Returns the position
    after it and whether it was an operator (ending a command)."""
    op = next((op for op in OPERATORS if line.startswith(op, position)), char)
    read.finish_word()
    if op == "&" and line.startswith("&>", position):
        read.skip_next_word = True
        return position + 2, False
    read.items.append(op)
    return position + len(op), True


def _redirection(line: str, position: int) -> tuple[int, bool]:
    """Past a redirection operator; True when a target file word follows (`> f`, not `2>&1`)."""
    match = re.match(r"[<>]+&?[0-9-]*|[<>]+", line[position:])
    operator = match.group(0) if match else line[position]
    return position + len(operator), not re.search(r"&[0-9-]+$", operator)


def _double_quoted(line: str, position: int, known: Mapping[str, str], scope: Scope | None) -> tuple[int, str, bool]:
    out: list[str] = []
    dirty = False
    while position < len(line):
        char = line[position]
        if char == '"':
            return position + 1, "".join(out), dirty
        if char == "\\" and position + 1 < len(line) and line[position + 1] in '"\\$`\n':
            out.append(line[position + 1])
            position += 2
        elif char in "$`":
            position, text, was_dirty = _dollar(line, position, known, scope, quoted=True)
            out.append(text)
            dirty |= was_dirty
        else:
            out.append(char)
            position += 1
    raise ShellSyntaxError("unbalanced double quote")


def _dollar(
    line: str, position: int, known: Mapping[str, str], scope: Scope | None = None, *, quoted: bool = False
) -> tuple[int, str, bool]:
    """Expand what starts at line[position] ('$' or '`'): (next position, text, unresolved)."""
    if line[position] == "`":
        end = line.find("`", position + 1)
        if end < 0:
            raise ShellSyntaxError("unbalanced backtick")
        return end + 1, line[position : end + 1], True
    if line.startswith("$(", position):
        depth = 0
        for index in range(position + 1, len(line)):
            if line[index] == "(":
                depth += 1
            elif line[index] == ")":
                depth -= 1
                if depth == 0:
                    return index + 1, line[position : index + 1], True
        raise ShellSyntaxError("unbalanced $(")
    if line.startswith("${", position):
        end = _closing_brace(line, position + 2)
        text, dirty = _parameter(line[position + 2 : end], known, scope, quoted=quoted)
        return end + 1, (line[position : end + 1] if dirty else text), dirty
    match = VARIABLE.match(line, position)
    if not match:
        return position + 1, "$", False
    name = match.group("plain") or ""
    value = _lookup(name, known, scope)
    if isinstance(value, str):
        return match.end(), value, False
    return match.end(), match.group(0), True


def _closing_brace(line: str, position: int) -> int:
    """The index of the `}` that closes a `${` whose body starts at position (nested `${}`, quotes skipped)."""
    depth = 0
    while position < len(line):
        char = line[position]
        if char == "\\":
            position += 2
            continue
        if char == "'":
            end = line.find("'", position + 1)
            if end < 0:
                raise ShellSyntaxError("unbalanced single quote")
            position = end + 1
            continue
        if char == '"':
            position = _double_quoted(line, position + 1, {}, None)[0]
            continue
        if line.startswith("${", position):
            depth += 1
            position += 2
            continue
        if char == "}":
            if depth == 0:
                return position
            depth -= 1
        position += 1
    raise ShellSyntaxError("unbalanced ${")


_UNSET = object()  # bash sees the name unset
_UNKNOWN = object()  # only a running shell knows


def _lookup(name: str, known: Mapping[str, str], scope: Scope | None) -> str | object:
    if scope is not None and name in scope.assigned:
        return scope.assigned[name]
    if name in known:
        return known[name]
    if scope is None:
        return _UNKNOWN
    if name in scope.symbolic:
        return "${" + name + "}"
    return _UNSET if scope.is_unset(name) else _UNKNOWN


def _parameter(body: str, known: Mapping[str, str], scope: Scope | None, *, quoted: bool) -> tuple[str, bool]:
    """`${NAME}`, `${NAME:-word}`, `${NAME-word}`, `${NAME:=word}`, `${NAME:+word}`, `${NAME:?word}` as bash
    expands them; any other form (`${#X}`, `${X%y}`, `${!X}`, ...) needs a shell."""
    match = PARAMETER.match(body)
    if not match:
        return "", True
    name, operator, word = match.group("name"), match.group("op") or "", match.group("word") or ""
    if not operator and word:
        return "", True
    value = _lookup(name, known, scope)
    if value is _UNKNOWN:
        return "", True
    is_set = isinstance(value, str)
    usable = is_set and (value != "" or not operator.startswith(":"))
    if not operator:
        return (value, False) if isinstance(value, str) else ("", True)
    kind = operator[-1]
    if kind == "+":
        return _expand_word(word, known, scope, quoted=quoted) if usable else ("", False)
    if usable:
        return str(value), False
    if kind == "?":
        return "", True  # bash stops the script here
    text, dirty = _expand_word(word, known, scope, quoted=quoted)
    if kind == "=":
        if dirty or scope is None or not re.match(r"^[A-Za-z_]", name):
            return "", True  # `${1:=x}`: bash refuses to assign a positional parameter
        scope.assigned[name] = text
    return text, dirty


def _expand_word(word: str, known: Mapping[str, str], scope: Scope | None, *, quoted: bool) -> tuple[str, bool]:
    """The word of `${X:-word}`: expanded, its quotes removed (inside double quotes a ' is a plain character)."""
    out: list[str] = []
    dirty = False
    position = 0
    while position < len(word):
        char = word[position]
        if char == "\\" and position + 1 < len(word):
            out.append(word[position + 1])
            position += 2
        elif char == "'" and not quoted:
            end = word.find("'", position + 1)
            if end < 0:
                raise ShellSyntaxError("unbalanced single quote")
            out.append(word[position + 1 : end])
            position = end + 1
        elif char == '"':
            position, text, was_dirty = _double_quoted(word, position + 1, known, scope)
            out.append(text)
            dirty |= was_dirty
        elif char in "$`":
            position, text, was_dirty = _dollar(word, position, known, scope, quoted=quoted)
            out.append(text)
            dirty |= was_dirty
        else:
            out.append(char)
            position += 1
    return "".join(out), dirty
