"""One JSON encoding for numbers JSON cannot hold, everywhere the tool writes JSON: NaN, +inf and -inf
become the strings "NaN", "Infinity" and "-Infinity" (the spellings of JavaScript and JSON5), and no
file or --json output ever carries a bare NaN token, "nan", null-for-NaN or a numpy repr."""

from __future__ import annotations

import json
import math
from typing import Any


def non_finite_text(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


def json_number(value: float) -> float | str:
    """A float as JSON holds it: itself when finite, else "NaN" / "Infinity" / "-Infinity"."""
    value = float(value)
    return value if math.isfinite(value) else non_finite_text(value)


def json_safe(value: Any) -> Any:
    """value with every non-finite float (numpy's included) replaced, recursively; other values as they are."""
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        return json_number(value)
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    if hasattr(value, "item") and callable(value.item) and getattr(value, "ndim", 0) == 0:  # numpy scalars
        try:
            return json_safe(value.item())
        except (TypeError, ValueError):
            return value
    return value


def dumps(value: Any, **kwargs: Any) -> str:
    """json.dumps with the one encoding; strict (a bare NaN can never slip through)."""
    kwargs.setdefault("default", str)
    return json.dumps(json_safe(value), allow_nan=False, **kwargs)
