"""Holes and endless outputs a co-worker can plant in a run's files: wall time, peak RSS and the verdict of a
one-shot judgment (`monitor --once`) of (1) an event file extended with `truncate -s +8G`, (2) a text log with a
100 MB hole without a newline and NaN lines after it, (3) a `--log-command "tail -n 100 LOG"` whose LOG has a 2 GB
hole; each beside the anchor measured in the same run: the same command on another checkout (`--anchor-code`,
e.g. the tree before hole skipping: `git archive 2e6c21b^ wrapper | tar -x -C /tmp/old`), killed at `--limit-s`.

    .venv/bin/python bench/bench_holes.py [--anchor-code /tmp/old/wrapper] [--limit-s 60]

Prints figures; asserts nothing."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

LINE = "{{'loss': {loss}, 'grad_norm': 1.0, 'learning_rate': 0.001, 'step': {step}}}\n"


def make_inputs(folder: Path) -> dict[str, list[str]]:
    from source_writers import tb_event, write_tb_events

    tb = folder / "tb"
    event_file = write_tb_events(tb, [tb_event(s, "train/loss", 2.0 / s + 0.1, wall_time=time.time()) for s in range(1, 200)])
    os.truncate(event_file, event_file.stat().st_size + 8 * 1024**3)
    log = folder / "train.log"
    with open(log, "w") as handle:
        handle.write("".join(LINE.format(loss=f"{2.0 / s + 0.1:.4f}", step=s) for s in range(1, 60)) + "{'loss': 0.3")
    os.truncate(log, log.stat().st_size + 100 * 1024**2)
    with open(log, "a") as handle:
        handle.write("".join(LINE.format(loss="nan", step=s) for s in range(60, 90)))
    big = folder / "big.log"
    big.write_text(LINE.format(loss="0.5", step=1))
    os.truncate(big, 2 * 1024**3)
    with open(big, "a") as handle:
        handle.write("".join(LINE.format(loss=f"{2.0 / s + 0.1:.4f}", step=s) for s in range(2, 90)))
    return {"event file + 8 GB hole": ["--tb", str(tb)],
            "text log, 100 MB hole, NaN after": ["--log", str(log)],
            "log command over a 2 GB hole": ["--log-command", f"tail -n 100 {big}", "--log-command-timeout", "120"]}


def measure(code: Path, args: list[str], limit_s: float, state: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(code), "GUARDED_SBATCH_STATE_DIR": str(state)}
    argv = ["/usr/bin/time", "-f", "%e %M", sys.executable, "-P", "-m", "guarded_sbatch", "monitor", "--once", *args]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=limit_s, cwd="/", env=env)
    except subprocess.TimeoutExpired:
        return f"no answer within {limit_s:.0f} s"
    wall, rss_kb = done.stderr.strip().splitlines()[-1].split()[-2:]
    verdict = " ".join(done.stdout.split()[:1] + done.stdout.split(":")[1:2]).strip()[:60]
    return f"{float(wall):.2f} s, {int(rss_kb) / 1024:.0f} MB peak RSS, {verdict}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--anchor-code", type=Path, help="another checkout's wrapper/ folder, measured beside ours")
    parser.add_argument("--limit-s", type=float, default=60.0)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-holes-") as folder:
        inputs = make_inputs(Path(folder))
        for name, args in inputs.items():
            ours = measure(REPO / "wrapper", args, options.limit_s, Path(folder) / "st-ours")
            line = f"{name:34} ours: {ours}"
            if options.anchor_code:
                line += f" | anchor: {measure(options.anchor_code, args, options.limit_s, Path(folder) / 'st-anchor')}"
            print(line, flush=True)


if __name__ == "__main__":
    main()
