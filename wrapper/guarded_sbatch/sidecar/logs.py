"""One logging format for the sidecar's own diagnostics and the admin paths.

The sidecar's output file holds its report blocks (its product) and its diagnostics; the diagnostics go
through `logging`, one logger per watched run (a shared monitor watches many, each writing to its own file),
in one format: `sidecar: message`, warnings marked `sidecar: warning: message`.
"""

from __future__ import annotations

import itertools
import logging
from typing import TextIO

_counter = itertools.count()


class _Format(logging.Formatter):
    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def format(self, record: logging.LogRecord) -> str:
        level = "" if record.levelno < logging.WARNING else f"{record.levelname.lower()}: "
        return f"{self.prefix}: {level}{record.getMessage()}"


def stream_logger(name: str, stream: TextIO, prefix: str = "sidecar") -> logging.Logger:
    """A logger of its own (not propagated) writing `prefix: message` lines to stream."""
    logger = logging.getLogger(f"guarded_sbatch.{name}.{next(_counter)}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    handler = logging.StreamHandler(stream)
    handler.setFormatter(_Format(prefix))
    logger.addHandler(handler)
    return logger
