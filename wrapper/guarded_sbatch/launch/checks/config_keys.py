"""A misspelled key in the run's config (`batch_szie: 128`): the program never reads it and trains on its default.

A key is known when the program's source names it (a string such as `config["batch_size"]` or `--batch-size`, or an
attribute such as `cfg.batch_size`; the program and the local modules it imports) or the reference config has it.
An unknown key one typo away from a known one (a swapped, wrong, missing or extra letter) is named with the key it
was meant to be. Only typos count: two real keys that differ in a digit (beta1, betas) or by more are never flagged.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from guarded_sbatch.launch.checks.program_source import parsed
from guarded_sbatch.launch.runconfig import RunConfig

MAX_FILES = 64  # the program and its local modules
NAME = re.compile(r"^-{0,2}[A-Za-z_][A-Za-z0-9_-]*$")


@dataclass(frozen=True)
class Misspelled:
    key: str  # the config's key as written ("train.batch_szie")
    meant: str  # the known name it is one typo away from ("batch_size")
    known_from: str  # "train.py reads it" / "the reference config has it"

    def line(self) -> str:
        return f"unknown config key {self.key}: did you mean {self.meant}? ({self.known_from})"


def misspelled_keys(intended: RunConfig, reference: RunConfig | None, program: Path | None) -> list[Misspelled]:
    from_program = program_names(program) if program is not None else set()
    from_reference = {_norm(part) for key in (reference.values if reference else {}) for part in key.split(".")}
    known = from_program | from_reference
    found: list[Misspelled] = []
    seen: set[str] = set()
    for key in intended.values:
        for part in key.split("."):
            word = _norm(part)
            if word in known or word in seen or part.isdigit():
                continue
            seen.add(word)
            meant = next((name for name in sorted(known) if _one_typo(word, name)), None)
            if meant is not None:
                where = f"{program.name} reads it" if program is not None and meant in from_program else \
                    "the reference config has it"
                found.append(Misspelled(key, meant, where))
    return found


def program_names(program: Path) -> set[str]:
    """Every name the program's source could read a config key by, in the program and its local modules."""
    names: set[str] = set()
    queue, done = [program], set[Path]()
    while queue and len(done) < MAX_FILES:
        path = queue.pop(0)
        if path in done or not path.is_file():
            continue
        done.add(path)
        tree = parsed(path)
        if tree is None:
            continue
        called = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and NAME.match(node.value):
                names.add(_norm(node.value.lstrip("-")))
            elif isinstance(node, ast.Attribute) and id(node) not in called:
                names.add(_norm(node.attr))
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                queue += _local_modules(node, program.parent)
    return names


def _local_modules(node: ast.Import | ast.ImportFrom, folder: Path) -> list[Path]:
    """The project's own modules an import names (`from model import Net`, `import mylib.data`)."""
    if isinstance(node, ast.ImportFrom):
        modules = [node.module] if node.module else []
    else:
        modules = [alias.name for alias in node.names]
    out: list[Path] = []
    for module in modules:
        base = folder.joinpath(*module.split("."))
        out += [base.with_suffix(".py"), base / "__init__.py"]
    return out


def _norm(name: str) -> str:
    return name.replace("-", "_").lower()


def _one_typo(word: str, name: str) -> bool:
    """Two letters swapped; from 8 letters on also one wrong, missing or extra letter. Never a difference in digits
    (beta1 / betas, layer_3 / layer_4 are two keys) nor in the first letter, never under 4 letters."""
    if min(len(word), len(name)) < 4 or word[0] != name[0] or _no_digits(word) == _no_digits(name):
        return False
    if len(word) == len(name):
        diff = [i for i in range(len(word)) if word[i] != name[i]]
        swapped = (len(diff) == 2 and diff[1] == diff[0] + 1 and word[diff[0]] == name[diff[1]]
                   and word[diff[1]] == name[diff[0]])
        wrong = len(diff) == 1 and len(word) >= 8 and (word[diff[0]] + name[diff[0]]).isalpha()
        return swapped or wrong
    if min(len(word), len(name)) < 8 or abs(len(word) - len(name)) != 1:
        return False
    short, long = sorted((word, name), key=len)
    return any(long[:i] + long[i + 1:] == short and not long[i].isdigit() for i in range(len(long)))


def _no_digits(text: str) -> str:
    return re.sub(r"\d", "", text)
