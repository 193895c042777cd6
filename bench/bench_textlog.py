"""Per-line cost of the text reader (`sources/textlog.py`: known formats, learned templates, the crash tracker) on
the verbatim public-log corpus (tests/data/public_logs), its logs concatenated and replicated to about 200k lines,
against an anchor measured in the same run on the same lines: a plain `re.findall` number scan (what any reader pays
at the least). Prints lines/s and us/line of both; asserts nothing.

    PYTHONPATH=wrapper .venv/bin/python bench/bench_textlog.py [--lines 200000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
import tempfile
import time
from pathlib import Path

from guarded_sbatch.sources.textlog import TextLogSource

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "data" / "public_logs"
NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|nan|inf")


def corpus_lines(target: int) -> list[str]:
    """The corpus logs, in name order, repeated until `target` lines (the last copy cut)."""
    one = [line for path in sorted(CORPUS.glob("*.log"))
           for line in path.read_text(encoding="utf-8", errors="replace").splitlines()]
    if not one:
        raise SystemExit(f"no logs under {CORPUS}")
    lines: list[str] = []
    while len(lines) < target:
        lines.extend(one[: target - len(lines)])
    return lines


def best_of(repeat: int, run: Callable[[], int]) -> tuple[float, float, int]:
    """(the fastest wall time of `repeat` runs, the least CPU time of this process, what the last run counted): on a
    shared machine the CPU time is the figure to compare."""
    wall, cpu, counted = float("inf"), float("inf"), 0
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        counted = run()
        wall = min(wall, time.perf_counter() - start)
        cpu = min(cpu, time.process_time() - start_cpu)
    return wall, cpu, counted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    lines = corpus_lines(args.lines)
    text = "\n".join(lines) + "\n"
    folder = Path(tempfile.mkdtemp(prefix="bench-textlog-"))
    log = folder / "corpus.log"
    log.write_text(text, encoding="utf-8")
    n = len(lines)
    print(f"corpus: {len(list(CORPUS.glob('*.log')))} logs, replicated to {n} lines ({log.stat().st_size / 1e6:.1f} MB)")

    def anchor() -> int:
        return sum(len(NUMBER.findall(line)) for line in text.split("\n"))

    def reader() -> int:
        return len(TextLogSource(log).read_new())  # a fresh reader: every line parsed, templates learned anew

    for label, run, unit in (("anchor: re.findall number scan", anchor, "numbers"),
                             ("TextLogSource.read_new (one read)", reader, "points")):
        wall, cpu, counted = best_of(args.repeat, run)
        print(f"{label:<36} {n / cpu:>10,.0f} lines/s  {1e6 * cpu / n:8.2f} us/line CPU  "
              f"({1e6 * wall / n:.2f} us/line wall; {counted} {unit}, best of {args.repeat})")


if __name__ == "__main__":
    main()
