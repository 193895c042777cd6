"""What only tests use, kept out of the package: the audit log read back, the user guide's tables written from the
package's own declarations (the tests hold the page to them), a history read from one reader, a TFRecord framed by
hand."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from guarded_sbatch.core.errors import ExitCode
from guarded_sbatch.judge.history import MetricHistory, Reader
from guarded_sbatch.records.audit import is_per_user
from guarded_sbatch.sbatch.guard_options import guard_table
from guarded_sbatch.sources.run_sources import RunSources, SourceSpec
from guarded_sbatch.sources.tfrecord import masked_crc32c


def read_audit(path: Path) -> list[dict[str, Any]]:
    """The records of an audit log, every user's file of a per-user folder."""
    files = sorted(path.glob("*.jsonl")) if is_per_user(path) else [path]
    return [json.loads(line) for file in files for line in file.read_text(encoding="utf-8").splitlines() if line.strip()]


def guard_options_markdown() -> str:
    """The guard options as docs/user-guide.md lists them."""
    rows = ["| option | value | what it does | GuardedExecutor keyword |", "|---|---|---|---|"]
    for row in guard_table():
        metavar = row.metavar.replace("|", "\\|")  # a table cell's pipe, even in code
        value = f"`{metavar}`" + (", repeatable" if row.repeatable else "") if row.metavar else "—"
        keyword = (f"`{row.keyword}=True`" if row.kind == "flag" else f"`{row.keyword}=`") if row.keyword else "—"
        rows.append(f"| `{row.flag}` | {value} | {row.help.replace('|', '/')} | {keyword} |")
    return "\n".join(rows) + "\n"


def exit_codes_markdown() -> str:
    """The exit codes as docs/user-guide.md shows them."""
    rows = ["| exit code | meaning |", "|---|---|", *(f"| {code.value} | {code.meaning} |" for code in ExitCode)]
    return "\n".join(rows) + "\n"


def history_read(reader: Reader, **limits: int) -> MetricHistory:
    """A history of everything one reader gives now: its points and the crashes it found."""
    history = MetricHistory(**limits)
    history.read_from(reader)
    return history


def frame_record(data: bytes) -> bytes:
    """One TFRecord: length, its masked crc, the data, the data's masked crc."""
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked_crc32c(length)) + data + struct.pack("<I", masked_crc32c(data))


def tb_specs(*folders: object, origin: str = "") -> list[SourceSpec]:
    """A run's TensorBoard folders as its record keeps them: specs of the kind, in `RunSources.specs`."""
    return [SourceSpec("tensorboard", str(folder), origin) for folder in folders]


def tb_folders(sources: RunSources) -> list[str]:
    """The TensorBoard folders the launch resolved for a run."""
    return [spec.locator for spec in sources.places("tensorboard")]


def recorded_tb(record: dict[str, Any]) -> list[str]:
    """The TensorBoard folders a run.json (as read) records for its run."""
    return tb_folders(RunSources.from_json(record["sources"]) or RunSources())
