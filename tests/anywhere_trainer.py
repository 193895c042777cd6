"""A stand-in trainer for the watch-anywhere tests: logs `step=N loss=X` lines, goes NaN on cue.

--nan-file PATH: healthy until PATH exists, then every loss is nan. --ignore-signals: ignore SIGINT and
SIGTERM (a stubborn child). --child: also start a stubborn child in the same process group.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import subprocess
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--log")
    parser.add_argument("--nan-file")
    parser.add_argument("--step-seconds", type=float, default=0.05)
    parser.add_argument("--ignore-signals", action="store_true")
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--pid-file")
    parser.add_argument("--steps", type=int, default=0, help="end after this many steps (0: never)")
    args = parser.parse_args()
    if args.ignore_signals:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if args.child:
        subprocess.Popen([sys.executable, __file__, "--ignore-signals", "--step-seconds", "1"],
                         stdout=subprocess.DEVNULL)
    if args.pid_file:
        with open(args.pid_file + ".tmp", "w") as handle:
            handle.write(str(os.getpid()))
        os.replace(args.pid_file + ".tmp", args.pid_file)
    out = open(args.log, "a", buffering=1) if args.log else sys.stdout
    step = 0
    while not args.steps or step < args.steps:
        step += 1
        broken = bool(args.nan_file) and os.path.exists(args.nan_file)
        loss = math.nan if broken else 2.0 * math.exp(-step / 200) + 0.1
        print(f"step={step} loss={loss:.5f}", file=out, flush=True)
        time.sleep(args.step_seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
