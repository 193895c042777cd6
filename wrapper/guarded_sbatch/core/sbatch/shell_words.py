"""Split one logical line of a batch script into words and operators, the way bash would, without a shell.

Quotes, backslashes and comments follow bash. `$VAR` / `${VAR}` are expanded from the variables given
(the script's own plain assignments and the environment); anything that needs a shell to know its value
(`$(...)`, backticks, unknown variables, `${X:-y}`) leaves the word marked `unresolved`. Operators
(`;`, `&&`, `||`, `|`, `&`) end a command; redirections (`> f`, `2>&1`) are dropped with their target.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

OPERATORS = (";;", "&&", "||", "|&", ";", "|", "&")
VARIABLE = re.compile(r"\$(?:\{(?P<braced>[^}]*)\}|(?P<plain>[A-Za-z_][A-Za-z0-9_]*|[0-9@*#?$!-]))")


class ShellSyntaxError(ValueError):
    pass


@dataclass(frozen=True)
class Word:
    text: str
    unresolved: bool = False  # its real value is only known when a shell runs it

    def __str__(self) -> str:
        return self.text


def split_commands(line: str, variables: Mapping[str, str] | None = None) -> list[list[Word]]:
    """The simple commands of a line, each a list of words (redirections removed)."""
    commands: list[list[Word]] = [[]]
    for item in tokenize(line, variables):
        if isinstance(item, Word):
            commands[-1].append(item)
        elif commands[-1]:
            commands.append([])
    return [words for words in commands if words]


def tokenize(line: str, variables: Mapping[str, str] | None = None) -> list[Word | str]:
    """Words (Word) and operators (str). Raises ShellSyntaxError on an unbalanced quote or `$(`."""
    known = variables or {}
    items: list[Word | str] = []
    chars: list[str] = []
    unresolved = False
    in_word = False
    skip_next_word = False
    position = 0
    length = len(line)

    def finish_word() -> None:
        nonlocal chars, unresolved, in_word, skip_next_word
        if in_word:
            if skip_next_word:
                skip_next_word = False
            else:
                items.append(Word("".join(chars), unresolved))
        chars, unresolved, in_word = [], False, False

    while position < length:
        char = line[position]
        if char in " \t\r\n":
            finish_word()
            position += 1
        elif char == "#" and not in_word:
            break
        elif char == "\\":
            in_word = True
            if position + 1 < length:
                chars.append(line[position + 1])
            position += 2
        elif char == "'":
            end = line.find("'", position + 1)
            if end < 0:
                raise ShellSyntaxError("unbalanced single quote")
            chars.append(line[position + 1 : end])
            in_word = True
            position = end + 1
        elif char == '"':
            position, text, dirty = _double_quoted(line, position + 1, known)
            chars.append(text)
            unresolved |= dirty
            in_word = True
        elif char == "$" or char == "`":
            position, text, dirty = _dollar(line, position, known)
            chars.append(text)
            unresolved |= dirty
            in_word = True
        elif char in "<>":
            if in_word and "".join(chars).isascii() and "".join(chars).isdigit():  # `2>file`: the digits are the fd, not a word
                chars, in_word = [], False
            finish_word()
            match = re.match(r"[<>]+&?[0-9-]*|[<>]+", line[position:])
            operator = match.group(0) if match else char
            position += len(operator)
            if not re.search(r"&[0-9-]+$", operator):
                skip_next_word = True  # the redirect's target file
        elif any(line.startswith(op, position) for op in OPERATORS) or char in "(){}" and not in_word:
            op = next((op for op in OPERATORS if line.startswith(op, position)), char)
            if op == "&" and line.startswith("&>", position):
                finish_word()
                position += 2
                skip_next_word = True
                continue
            finish_word()
            items.append(op)
            position += len(op)
        else:
            chars.append(char)
            in_word = True
            position += 1
    finish_word()
    return items


def _double_quoted(line: str, position: int, known: Mapping[str, str]) -> tuple[int, str, bool]:
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
            position, text, was_dirty = _dollar(line, position, known)
            out.append(text)
            dirty |= was_dirty
        else:
            out.append(char)
            position += 1
    raise ShellSyntaxError("unbalanced double quote")


def _dollar(line: str, position: int, known: Mapping[str, str]) -> tuple[int, str, bool]:
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
    match = VARIABLE.match(line, position)
    if not match:
        return position + 1, "$", False
    name = match.group("plain") or match.group("braced") or ""
    if name in known:
        return match.end(), known[name], False
    return match.end(), match.group(0), True
