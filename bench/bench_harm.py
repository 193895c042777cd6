"""Figures for "the guard never does harm": parse time of megabyte lines of spaces through the text-log
reader, the cost of sanitising points on entry, and a FIFO / device refused without blocking.

    PYTHONPATH=wrapper python bench/bench_harm.py
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "wrapper"))

from guarded_sbatch.sources.points import MetricPoint, sanitize_points
from guarded_sbatch.sources.base import SourceError
from guarded_sbatch.sources.textlog import TextLogSource

MB = 1024 * 1024
LINES = {
    "1 MB of spaces": b" " * MB,
    "a + 1 MB of spaces + b": b"a" + b" " * MB + b"b",
    "step 5 + 1 MB of spaces + loss=1": b"step 5 " + b" " * MB + b" loss=1.0",
    "5 000 spaces between words": b"a" + b" " * 5000 + b"b",
    "1 MB of tabs": b"\t" * MB,
}


def parse_ms(line: bytes, repeat: int = 3) -> float:
    best = float("inf")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "train.log"
        for _ in range(repeat):
            path.write_bytes(line + b"\nstep 1 loss=1.0\n")
            source = TextLogSource(path)
            started = time.perf_counter()
            source.read_new()
            best = min(best, time.perf_counter() - started)
    return best * 1000


def main() -> None:
    print("text log reader, one line (best of 3, includes reading the file):")
    for name, line in LINES.items():
        print(f"  {name:36s} {parse_ms(line):8.1f} ms")
    points = [MetricPoint(step, 0.0, "loss", 1.0 / (step + 1)) for step in range(1_000_000)]
    started = time.perf_counter()
    kept, _ = sanitize_points(points)
    print(f"sanitize_points: {len(kept)} clean points in {(time.perf_counter() - started) * 1000:.0f} ms")
    hostile = [MetricPoint(10**20 if i % 2 else i, float("nan"), "loss", 10**400) for i in range(100_000)]  # type: ignore[arg-type]
    started = time.perf_counter()
    kept, notes = sanitize_points(hostile)
    print(f"sanitize_points: 100000 hostile points -> {len(kept)} kept in {(time.perf_counter() - started) * 1000:.0f} ms"
          f" ({'; '.join(notes)})")
    with tempfile.TemporaryDirectory() as folder:
        fifo = Path(folder) / "run-x.wandb"
        os.mkfifo(fifo)
        for path in (fifo, Path("/dev/zero")):
            started = time.perf_counter()
            try:
                TextLogSource(path).read_new()
                outcome = "read?!"
            except SourceError as exc:
                outcome = f"SourceError ({str(exc)[:60]})"
            print(f"{str(path)[-14:]:>14}: {outcome} in {(time.perf_counter() - started) * 1000:.2f} ms")


if __name__ == "__main__":
    main()
