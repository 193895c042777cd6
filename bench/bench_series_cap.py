"""Memory and time of a one-shot judgment when a run logs many distinct tags (per-sample or per-layer logging,
or a file planted to exhaust the watcher): peak RSS and wall time of `monitor --once --json --tb DIR` for
10^5 and 10^6 distinct tags, ours beside the anchor measured in the same run (the same command on another
checkout, e.g. main before the series cap: `--anchor-code /work/main/wrapper`), each under the sidecar's memory
limit as an address-space limit (`--limit-gb`, default 4), so a run that would exhaust it says so.

    .venv/bin/python bench/bench_series_cap.py [--tags 100000 1000000] [--anchor-code PATH] [--limit-gb 4]

Prints figures; asserts nothing."""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import socket
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VALUES_PER_EVENT = 1000


def write_run(folder: Path, tags: int) -> Path:
    """A TensorBoard run: 200 steps of train/loss and `tags` distinct per-layer tags logged once each."""
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.summary.writer.record_writer import RecordWriter

    folder.mkdir(parents=True, exist_ok=True)
    # named as a real writer names it (this host, this process): the reader attributes event files by writer
    path = folder / f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}.{os.getpid()}.0"
    with open(path, "wb") as handle:
        writer = RecordWriter(handle)
        writer.write(Event(wall_time=time.time(), file_version="brain.Event:2").SerializeToString())
        for step in range(1, 201):
            value = Summary.Value(tag="train/loss", simple_value=2.0 / step + 0.1)
            writer.write(Event(wall_time=time.time(), step=step, summary=Summary(value=[value])).SerializeToString())
        for start in range(0, tags, VALUES_PER_EVENT):
            values = [Summary.Value(tag=f"layers/{i}/grad_norm", simple_value=0.5)
                      for i in range(start, min(tags, start + VALUES_PER_EVENT))]
            writer.write(Event(wall_time=time.time(), step=200, summary=Summary(value=values)).SerializeToString())
        writer.flush()
    return path


def measure(code: Path, folder: Path, limit_gb: float) -> dict[str, object]:
    """Peak RSS (MB), wall time and outcome of one `monitor --once --json` in a fresh process."""
    env = {**os.environ, "PYTHONPATH": str(code), "GUARDED_SBATCH_STATE_DIR": str(folder.parent / "state")}
    argv = [sys.executable, "-P", "-m", "guarded_sbatch", "monitor", "--once", "--json", "--tb", str(folder)]
    limit = int(limit_gb * 1024**3)

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    started = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=err, preexec_fn=cap, cwd="/")
        _, status, usage = os.wait4(proc.pid, 0)  # reaped here, for this child's own peak RSS
        proc.returncode = os.waitstatus_to_exitcode(status)
        elapsed = time.perf_counter() - started
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    try:
        answer = json.loads(stdout.strip().splitlines()[-1])
        outcome = f"{answer['decision']} {answer.get('reason', '')}: {answer.get('message', '')[:110]}"
    except (ValueError, IndexError, KeyError):
        last = (stderr.strip().splitlines() or ["no output"])[-1]
        outcome = f"exit {proc.returncode}: {last[:140]}"
    return {"rss_mb": usage.ru_maxrss / 1024, "seconds": elapsed, "outcome": outcome}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tags", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--anchor-code", type=Path, default=Path(__file__).resolve().parents[1] / "wrapper",
                        help="the wrapper/ folder of the checkout to compare with (default: this checkout's)")
    parser.add_argument("--limit-gb", type=float, default=4.0)
    args = parser.parse_args()
    print(f"one-shot judgment of a run with many distinct tags, address space limited to {args.limit_gb:g} GB")
    print(f"{'tags':>9}  {'file MB':>7}  {'code':<22} {'peak RSS MB':>11}  {'seconds':>7}  outcome")
    with tempfile.TemporaryDirectory(prefix="bench-series-cap-") as tmp:
        for tags in args.tags:
            folder = Path(tmp) / f"run-{tags}"
            event_file = write_run(folder, tags)
            size = event_file.stat().st_size / 1e6
            rows = [("ours (series cap)", REPO / "wrapper")]
            if args.anchor_code.is_dir():
                rows.append((f"anchor {args.anchor_code.parent.name}", args.anchor_code))
            for label, code in rows:
                figures = measure(code, folder, args.limit_gb)
                print(f"{tags:>9}  {size:>7.1f}  {label:<22} {figures['rss_mb']:>11.0f}  {figures['seconds']:>7.1f}  "
                      f"{figures['outcome']}", flush=True)


if __name__ == "__main__":
    main()
