"""Cost of watching a log through a command (`monitor --log-command "tail -c 2000000 LOG"`): the first poll
(a whole 2 MB window parsed), a poll with 100 new lines, an idle poll. Prints figures; asserts nothing.

    PYTHONPATH=wrapper .venv/bin/python bench/bench_command_log.py
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from guarded_sbatch.sources.command_log import CommandLogSource


def timed(label: str, source: CommandLogSource) -> None:
    wall, cpu = time.perf_counter(), time.process_time()
    points = source.read_new()
    print(f"{label:<32} {len(points):>7} points  wall {time.perf_counter() - wall:6.3f} s  "
          f"CPU {time.process_time() - cpu:6.3f} s (this process; tail itself not counted)")


def main() -> None:
    folder = Path(tempfile.mkdtemp(prefix="bench-command-log-"))
    log = folder / "train.log"
    with open(log, "w") as handle:
        for step in range(1, 60001):
            handle.write(f"step={step} loss={1.0 / step:.6f} lr=0.001 grad_norm=1.0\n")
    print(f"log: {log.stat().st_size / 1e6:.1f} MB, 60000 lines; window: tail -c 2000000")
    source = CommandLogSource(f"tail -c 2000000 {log}", folder / "spool.log")
    timed("first poll (whole window)", source)
    with open(log, "a") as handle:
        for step in range(60001, 60101):
            handle.write(f"step={step} loss={1.0 / step:.6f} lr=0.001 grad_norm=1.0\n")
    timed("poll with 100 new lines", source)
    timed("idle poll", source)
    log.write_text("".join(f"step={s} loss=1.0\n" for s in range(1, 11)))  # rotated
    timed("poll after rotation (10 lines)", source)


if __name__ == "__main__":
    main()
