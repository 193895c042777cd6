"""Render a public run (tests/data/public_runs/<name>.json) as its tool prints it.

A run file holds facts only: the numbers a real run logged (step, metric names and values), its events (overflow,
loss-scale change, crash) and the layout features a reader meets (a tqdm bar before a line, a header row, a
blockquote a poster typed). This module prints them with the tool's own format strings, cited by path per family
in public_runs_formats.py, so the text judged is ours: the tools' formats with the real run's numbers.

Record: {"k": kind, <fields>, "m": [[name, value(, fmt)], ...], "pad": n, "end": ""}. A value is a JSON number, or
"nan"/"inf"/"-inf"; `fmt` (a format spec: ".3f", ".5e", "%") is the precision the tool printed that number with
where the shortest form differs; a pair [a, b] is printed "a (b)" (a meter's value and its average).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import public_runs_formats as f1
import public_runs_formats2 as f2
from public_runs_formats import Kind, fmt_value

Value = Any
FAMILIES: dict[str, dict[str, Kind]] = {
    "hf": f1.HF, "deepspeed": f1.HF, "dschat": {**f1.COMMON, **f1.DS_CHAT}, "keras": f1.KERAS, "jsonl": f1.JSONL,
    "detectron2": f1.DETECTRON2, "fairseq": f1.FAIRSEQ, "mm": f1.MM, "megatron": f1.MEGATRON, "nemo": f1.NEMO,
    "nanogpt": {**f1.COMMON, **f1.NANOGPT}, "paddle": f1.PADDLE, "tqdm": f1.COMMON, "lightning": f1.COMMON,
    "yolo": f2.YOLO, "caffe": f2.CAFFE, "bigdl": f2.BIGDL, "r2c": f2.R2C, "skipnet": f2.SKIPNET,
    "tensorflow": f2.TENSORFLOW, "tslib": f2.TSLIB, "radar": f2.RADAR, "verse": f2.VERSE, "lion": f2.LION,
    "openpcdet": f2.OPENPCDET, "kohya": f2.KOHYA,
}


def join_metrics(metrics: list[list[Value]], pair: str, sep: str) -> str:
    return sep.join(pair.format(k=m[0], v=fmt_value(m[1], m[2] if len(m) > 2 else None)) for m in metrics)


def render_record(family: str, record: dict[str, Any]) -> str:
    kinds = FAMILIES[family]
    kind = kinds[record["k"]] if record["k"] in kinds else f1.COMMON[record["k"]]
    if callable(kind):
        text = kind(record)
    else:
        text = _template(kind, record)
    return text + " " * record.get("pad", 0)


def _template(kind: Kind, record: dict[str, Any]) -> str:
    template, pair, sep = kind if isinstance(kind, tuple) else (kind, "", "")
    fields = {key: _field(value) for key, value in record.items() if key not in {"k", "m", "pad", "end"}}
    if "m" in record:
        fields["m"] = join_metrics(record["m"], pair, sep)
    return template.format(**fields)


class Token(str):
    """A non-finite value as the tool wrote it ('nan', '-nan', 'inf'); formatted with a spec like the float."""

    def __format__(self, spec: str) -> str:
        return format(float(self), spec) if spec else str(self)


def _field(value: Value) -> Value:
    if isinstance(value, list) and isinstance(value[1], str) and value[1] not in f1.NONFINITE:
        return fmt_value(value[0], value[1])  # [number, spec]
    if isinstance(value, list):
        return fmt_value(value)  # [value, average]
    return Token(value) if isinstance(value, str) and value in f1.NONFINITE else value


def render(run: dict[str, Any]) -> str:
    """The whole log text of a run."""
    out: list[str] = []
    line = ""
    for record in run["records"]:
        line += render_record(run["family"], record)
        if record.get("end", "\n") == "\n":
            out.append(line)
            line = ""
    if line:
        out.append(line)
    paste: Callable[[str], str] = _quoted if run.get("paste") == "blockquote" else (lambda text: text)
    return "".join(paste(text) + "\n" for text in out)


def _quoted(text: str) -> str:
    """A log pasted as a Markdown blockquote: every line after '> ', a quoted blank line between."""
    return f"> {text}\n> "


def load(path: Path) -> dict[str, Any]:
    with open(path, encoding="utf-8") as handle:
        run: dict[str, Any] = json.load(handle)
    return run
