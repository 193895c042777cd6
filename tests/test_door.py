"""Every open, read, write, lock and delete of the package goes through the door (core/door/): an AST scan finds any
file access elsewhere. Calls on a path object are recognised by their method name; calls of os, shutil, fcntl and
tempfile by their module."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "wrapper" / "guarded_sbatch"
DOOR = PACKAGE / "core" / "door"

PATH_METHODS = {"open", "read_text", "read_bytes", "write_text", "write_bytes", "unlink", "rmdir", "rename", "replace",
                "mkdir", "touch", "chmod", "symlink_to", "hardlink_to"}
MODULE_CALLS = {
    "os": {"open", "remove", "unlink", "rename", "replace", "rmdir", "mkdir", "makedirs", "removedirs", "chmod",
           "lchmod", "chown", "symlink", "link", "truncate", "mkfifo"},
    "shutil": {"rmtree", "copy", "copy2", "copyfile", "copytree", "move", "copymode", "copystat"},
    "fcntl": {"flock", "lockf"},
    "tempfile": {"mkstemp", "mkdtemp", "NamedTemporaryFile", "TemporaryFile", "TemporaryDirectory",
                 "SpooledTemporaryFile"},
}
# str.replace / bytes.replace / dataclasses.replace share a name with Path.replace: a call with two positional
# string-ish arguments is a text replace, never a rename
_TEXT_METHODS_ALSO = {"replace"}


def _accesses(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id == "open":
            found.append((node.lineno, "open()"))
        if not isinstance(func, ast.Attribute):
            continue
        owner = func.value
        if isinstance(owner, ast.Name) and owner.id in MODULE_CALLS:
            if func.attr in MODULE_CALLS[owner.id]:
                found.append((node.lineno, f"{owner.id}.{func.attr}()"))
            continue
        if isinstance(owner, ast.Name) and owner.id == "door":
            continue  # the door itself
        if func.attr in PATH_METHODS:
            if func.attr == "open" and node.args and not isinstance(node.args[0], ast.Constant):
                continue  # Path.open takes a mode string; `kind.open(target)` is a reader's constructor
            if func.attr in _TEXT_METHODS_ALSO and (len(node.args) >= 2 or node.keywords):
                continue  # text.replace(a, b), dataclasses.replace(x, field=...)
            found.append((node.lineno, f".{func.attr}()"))
    return found


def test_every_file_access_goes_through_the_door() -> None:
    outside = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.is_relative_to(DOOR):
            continue
        for line, what in _accesses(ast.parse(path.read_text(encoding="utf-8"))):
            outside.append(f"{path.relative_to(PACKAGE)}:{line}: {what}")
    assert not outside, "file access outside core/door/:\n" + "\n".join(outside)


def test_the_scan_finds_what_it_looks_for() -> None:
    code = ("import os, shutil, fcntl, tempfile\nopen('x')\nos.open('x', 0)\nPath('x').write_text('y')\n"
            "shutil.rmtree('x')\nfcntl.flock(3, 2)\ntempfile.mkstemp()\np.unlink()\n'a'.replace('a', 'b')\n")
    found = [what for _, what in _accesses(ast.parse(code))]
    assert found == ["open()", "os.open()", ".write_text()", "shutil.rmtree()", "fcntl.flock()", "tempfile.mkstemp()",
                     ".unlink()"]
