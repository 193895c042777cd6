"""A stand-in trainer the guard cannot read: its lines hold timings only (`it 10 | time 0.370 | data 0.025`: numbers
that neither fall nor rise, in slots named for durations, which no loss choice takes), or it prints nothing at all.

--nan-at N: from iteration N on, the `data` slot (or, with --loss, the loss) is nan. --silent: print nothing, write
nothing. --to FILE: write the lines to FILE, not stdout. --loss: add a `loss` slot the guard knows.
"""

from __future__ import annotations

import argparse
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--step-seconds", type=float, default=0.25)
    parser.add_argument("--nan-at", type=int, default=0)
    parser.add_argument("--silent", action="store_true")
    parser.add_argument("--to")
    parser.add_argument("--loss", action="store_true")
    args = parser.parse_args()
    out = open(args.to, "a", encoding="utf-8") if args.to else sys.stdout
    for i in range(1, args.steps + 1):
        time.sleep(args.step_seconds)
        if args.silent:
            continue
        broken = bool(args.nan_at) and i >= args.nan_at
        data = float("nan") if broken and not args.loss else 0.02 + 0.01 * ((i * 7) % 5) / 4
        line = f"it {i * 10} | time {0.31 + 0.02 * ((i * 3) % 4):.3f} | data {data:.3f}"
        if args.loss:
            line += f" | loss {float('nan') if broken else 2.0 / (1 + 0.05 * i):.4f}"
        print(line, file=out, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
