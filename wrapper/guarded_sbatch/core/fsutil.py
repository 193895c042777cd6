"""Small file-system helpers: atomic JSON writes and the per-user state folder."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from guarded_sbatch.core.jsonnum import json_safe


def state_dir() -> Path:
    """Where guarded-sbatch keeps its own state ($GUARDED_SBATCH_STATE_DIR, else XDG state home)."""
    explicit = os.environ.get("GUARDED_SBATCH_STATE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "guarded-sbatch"


def write_json_atomic(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            # one encoding for NaN/Infinity everywhere (core/jsonnum.py)
            json.dump(json_safe(data), handle, indent=2, sort_keys=True, default=str, allow_nan=False)
            handle.write("\n")
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def read_json(path: Path) -> Any | None:
    """The JSON in path, or None when it is missing or half-written."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError, UnicodeDecodeError):
        return None


def write_text_atomic(path: Path, text: str) -> None:
    """Write text to path through a temporary file in the same folder and an atomic rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
