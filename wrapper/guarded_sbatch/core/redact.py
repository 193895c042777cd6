"""Keep secrets out of everything the tool writes: values of token-like environment variables
and common key shapes are replaced before text reaches a report, note, registry or evidence."""

from __future__ import annotations

import os
import re

_SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)", re.IGNORECASE)
_KEY_SHAPES = re.compile(r"\b(?:hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_-]{20,}|[a-f0-9]{40})\b")


def secret_values(environ: dict[str, str] | None = None) -> list[str]:
    env = os.environ if environ is None else environ
    return sorted(
        {value for name, value in env.items() if _SECRET_NAME.search(name) and len(value) >= 6},
        key=len, reverse=True,
    )


def redact(text: str, environ: dict[str, str] | None = None) -> str:
    for value in secret_values(environ):
        text = text.replace(value, "[redacted]")
    return _KEY_SHAPES.sub("[redacted]", text)
