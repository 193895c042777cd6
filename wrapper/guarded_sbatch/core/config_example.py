"""site_configs/example-site.toml, written from the config schema (a test holds the file equal to it)."""

from __future__ import annotations

import json
import sys
from typing import Any

from guarded_sbatch.core import config_schema


def render_example_site() -> str:
    """site_configs/example-site.toml, from the schema: every key, its documentation and the site's example value."""
    lines: list[str] = [
        "# guarded-sbatch site config (TOML). The modulefile points GUARDED_SBATCH_SITE_CONFIG at this file.",
        "# Users may override keys in ~/.config/guarded-sbatch/config.toml (or $GUARDED_SBATCH_USER_CONFIG),",
        "# except the keys listed in `locked`: a user config that changes one of those is refused.",
        "# Written from guarded_sbatch/core/config_schema.py (by core/config_example.py); edit the schema, not this file.",
    ]
    table = ""
    for key in config_schema.SCHEMA:  # as it is now (a test may extend it)
        if key.kind == "table":
            lines += ["", *(f"# {line}".rstrip() for line in key.doc.split("\n")), f"[{key.path}]"]
            lines += [f"{name} = {_toml(value)}" for name, value in (key.example or {}).items()]
            table = key.path
            continue
        *tables, name = key.path.split(".")
        if ".".join(tables) != table:
            table = ".".join(tables)
            lines += ["", f"[{table}]"]
        if key.doc:
            if lines[-1] != f"[{table}]":
                lines.append("")
            lines += [f"# {line}".rstrip() for line in key.doc.split("\n")]
        value = key.example if key.example is not None else key.default
        text = _toml(value)
        if isinstance(value, list) and len(text) > 100:  # one item a line
            text = "[\n" + "".join(f"  {_toml(item)},\n" for item in value) + "]"
        lines.append(f"{name} = {text}" + (f"  # {key.note}" if key.note else ""))
    return "\n".join(lines) + "\n"


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f"'{value}'" if "\\" in value or '"' in value else json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(item) for item in value) + "]"
    return json.dumps(value)


if __name__ == "__main__":  # python -m guarded_sbatch.core.config_example > site_configs/example-site.toml
    sys.stdout.write(render_example_site())
