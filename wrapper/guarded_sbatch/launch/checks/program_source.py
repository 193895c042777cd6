"""The program's source as the pre-flight reads it: parsed with ast once per launch (never run), for every check
that reads it (interpreter, arguments, config keys, seed)."""

from __future__ import annotations

import ast
import functools
import os
from pathlib import Path

from guarded_sbatch.core.fsutil import read_bounded

PROGRAM_BYTES = 1 << 20  # a source file read at most this far


def parsed(program: Path) -> ast.Module | None:
    """The file's syntax tree; None when it cannot be read or parsed."""
    try:
        info = os.stat(program)
    except OSError:
        return None
    return _parsed(program, info.st_mtime_ns, info.st_size)


@functools.lru_cache(maxsize=32)
def _parsed(program: Path, _mtime_ns: int, _size: int) -> ast.Module | None:
    try:
        return ast.parse(read_bounded(program, PROGRAM_BYTES, head=True))
    except (OSError, SyntaxError, ValueError):
        return None
