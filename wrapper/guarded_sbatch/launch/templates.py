"""Render sbatch templates: `{{name}}` placeholders only, so bash's own `${...}` survives untouched.

A placeholder without a value is an error, never a silent blank. Values are inserted verbatim:
callers quote them for bash (shlex.quote) where they land in a command line.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from importlib import resources
from pathlib import Path

from guarded_sbatch.core.errors import UsageError

PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


def placeholders(text: str) -> set[str]:
    return set(PLACEHOLDER.findall(text))


def render_template(text: str, values: Mapping[str, str], *, template_name: str = "template") -> str:
    missing = sorted(placeholders(text) - set(values))
    if missing:
        raise UsageError(
            f"{template_name}: no value for placeholder(s) {', '.join(missing)}; "
            "give them in the site config or on the command line"
        )
    return PLACEHOLDER.sub(lambda m: values[m.group(1)], text)


def builtin_templates_dir() -> Path:
    """The templates shipped inside the package (package data: a wheel installed into /opt has them too)."""
    return Path(str(resources.files("guarded_sbatch") / "sbatch_templates"))


def load_template(name: str, search_dirs: list[Path] | None = None) -> tuple[str, Path]:
    """Find `name` (e.g. "sidecar.sbatch") in the site's dirs first, then the built-in ones."""
    for folder in [*(search_dirs or []), builtin_templates_dir()]:
        candidate = folder / name
        if candidate.is_file():
            try:
                return candidate.read_text(encoding="utf-8"), candidate
            except (OSError, UnicodeDecodeError) as exc:
                raise UsageError(f"cannot read template {candidate}: {exc}; fix its permissions or encoding") from None
    raise UsageError(f"no sbatch template named {name!r}; look in guarded_sbatch/sbatch_templates/ or the site config's template_dirs")
