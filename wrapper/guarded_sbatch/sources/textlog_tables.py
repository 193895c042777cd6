"""The table formats of a trainer's stdout: a header line naming the columns, then rows of numbers under it.
Whitespace tables (ultralytics / YOLO: `Epoch  GPU_mem  box_loss ...`) and `|` tables (detectron2's
`|   AP   |  AP50  |`); a YOLO row's training loss is the sum of its parts where it prints no total.
The reader (textlog.py) keeps the last header seen and offers each next line to `table_row`.
"""

from __future__ import annotations

import math
import re

from guarded_sbatch.sources.textlog_formats import ParsedLine
from guarded_sbatch.sources.textlog_tokens import NUMBER, parse_number

_N = NUMBER.pattern
_COLUMN = re.compile(r"[A-Za-z][\w()\-@/%.]*(?::[\w()\-@/%.]+)?:?")  # `mAP@.5:.95:` (YOLOv5's last column)
_ROW_FIELD = re.compile(rf"(?:{_N})(?:/\d+)?[A-Za-z%]{{0,3}}:?|all")


class PipeColumns(list[str]):
    """The column names of a `|` table's header: only `|` rows are its rows."""


def _pipe_cells(message: str) -> list[str] | None:
    """The cells of a `| a | b | c |` line (a markdown table's header or row), 3 or more; None for other lines."""
    text = message.strip()
    if len(text) > 2000 or not (text.startswith("|") and text.endswith("|")) or text.count("|") < 4:
        return None
    return [cell.strip() for cell in text[1:-1].split("|")]


def table_header(message: str) -> list[str] | None:
    """Column names of a whitespace table (ultralytics): 4+ names, 2+ spaces between every two; or of a `|` table
    (`|   AP   |  AP50  |  AP75  |`): 3+ names, one per cell."""
    cells = _pipe_cells(message)
    if cells is not None:
        return PipeColumns(cells) if all(_COLUMN.fullmatch(c) for c in cells) else None
    if "  " not in message or "=" in message or len(message) > 400:
        return None
    columns = re.split(r"\s{2,}", message.strip())
    if len(columns) < 4 or len(columns) != len(message.split()):
        return None
    if not all(_COLUMN.fullmatch(c) for c in columns):
        return None
    return [c.rstrip(":") for c in columns]


def table_row(message: str, columns: list[str]) -> ParsedLine | None:
    cells = _pipe_cells(message) if isinstance(columns, PipeColumns) else None
    if isinstance(columns, PipeColumns) and cells is None:
        return None  # a `|` table's rows are `|` rows
    fields = cells if cells is not None else message.split()
    if len(fields) < len(columns) or len(message) > 2000:
        return None
    fields = fields[: len(columns)]
    if not all(_ROW_FIELD.fullmatch(f) for f in fields):
        return None
    if columns[0].lower() == "epoch" and fields[0] == "all":
        return None  # an evaluation's `all` row under a training header: not this table's
    is_eval = columns[0] == "Class"
    parsed = ParsedLine(is_eval=is_eval)
    parts = set() if is_eval else _loss_parts(columns)
    for name, text in zip(columns, fields):
        number = NUMBER.match(text)
        if number is None:
            continue
        if name.lower() == "epoch":
            parsed.step = int(parse_number(number.group()))
            continue
        key = re.sub(r"[()]", "", name)
        if parts and key.lower() == "total":
            key = "loss"  # YOLOv5's first tables: `box obj cls total`, the total is the training loss
        elif key in parts and not key.endswith("_loss"):
            key += "_loss"  # `box` of YOLOv3-v5's first tables is their later `box_loss`
        parsed.values[f"val/{key}" if is_eval else key] = parse_number(number.group())
    if parts and "loss" not in parsed.values:
        total = yolo_loss_sum(parsed.values)
        if total is not None:  # YOLOv5 (v6+) and v8 print only the parts: their training loss is the sum
            parsed.values["loss"] = total
    return parsed if parsed.values else None


def yolo_loss_sum(values: dict[str, float], prefix: str = "") -> float | None:
    """The sum of a YOLO row's loss parts (`box_loss`, `obj_loss`, `cls_loss`, `dfl_loss`, ... after `prefix`), when
    there are two or more and no total among them; None otherwise."""
    if f"{prefix}loss" in values:
        return None
    found = [v for k, v in values.items()
             if k.startswith(prefix) and k[len(prefix):].removesuffix("_loss") in _YOLO_PARTS and k.endswith("_loss")]
    return math.fsum(found) if len(found) >= 2 else None


_YOLO_PARTS = frozenset({"box", "obj", "cls", "dfl", "seg", "kobj", "pose", "rle", "l1", "giou"})


def _loss_parts(columns: list[str]) -> set[str]:
    """The loss parts of a YOLO-style table header (`box obj cls total`, `box_loss cls_loss dfl_loss`): two or
    more of them, or none."""
    parts = {c for c in columns if c.lower().removesuffix("_loss") in _YOLO_PARTS}
    return parts if len(parts) >= 2 else set()

