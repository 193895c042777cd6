"""Benchmark: our TensorBoard reader vs EventAccumulator vs tbparse on one large event file.

    .venv/bin/python bench/bench_tensorboard.py [--scalars 1000000] [--skip-slow]

Writes an event file of N scalars with tensorboard's own EventFileWriter, then measures each reader in
its own subprocess (so each gets its own peak RSS): a full read, and the incremental read after 1k new
events are appended to the same file. Prints times, ratios and peak RSS; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "wrapper"))

TAGS = ("train/loss", "train/lr", "train/grad_norm", "eval/loss")
APPENDED_EVENTS = 1000


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _event(step: int, tag: str, value: float, as_tensor: bool):  # type: ignore[no-untyped-def]
    from tensorboard.compat.proto import tensor_pb2, tensor_shape_pb2, types_pb2
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary

    if as_tensor:
        tensor = tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, tensor_shape=tensor_shape_pb2.TensorShapeProto(),
                                        float_val=[value])
        summary_value = Summary.Value(tag=tag, tensor=tensor)
    else:
        summary_value = Summary.Value(tag=tag, simple_value=value)
    return Event(wall_time=1.7e9 + step, step=step, summary=Summary(value=[summary_value]))


def write_file(folder: Path, scalars: int, as_tensor: bool) -> None:
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    writer = EventFileWriter(str(folder), max_queue_size=100_000, flush_secs=3600)
    for index in range(scalars):
        step = index // len(TAGS)
        writer.add_event(_event(step, TAGS[index % len(TAGS)], 1.0 / (1 + step % 977), as_tensor))
    writer.close()


def append_events(folder: Path, first_step: int, as_tensor: bool) -> None:
    from tensorboard.summary.writer.record_writer import RecordWriter

    event_file = next(folder.glob("*tfevents*"))
    with open(event_file, "ab") as handle:
        writer = RecordWriter(handle)
        for index in range(APPENDED_EVENTS):
            step = first_step + index // len(TAGS)
            writer.write(_event(step, TAGS[index % len(TAGS)], 0.5, as_tensor).SerializeToString())
        writer.flush()


def read_ours(folder: Path, streamed: bool) -> dict[str, float]:
    from guarded_sbatch.sources.tensorboard import TensorBoardSource

    start = time.perf_counter()
    source = TensorBoardSource(folder)
    count = 0
    if streamed:
        while batch := source.read_new(max_points=50_000):
            count += len(batch)
    else:
        count = len(source.read_new())
    return {"seconds": time.perf_counter() - start, "points": count}


def read_accumulator(folder: Path) -> dict[str, float]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    start = time.perf_counter()
    accumulator = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    accumulator.Reload()
    tags = accumulator.Tags()
    count = sum(len(accumulator.Scalars(t)) for t in tags["scalars"]) + sum(
        len(accumulator.Tensors(t)) for t in tags["tensors"])
    return {"seconds": time.perf_counter() - start, "points": count}


def read_tbparse(folder: Path) -> dict[str, float]:
    from tbparse import SummaryReader

    start = time.perf_counter()
    reader = SummaryReader(str(folder))
    count = len(reader.scalars) + len(reader.tensors)
    return {"seconds": time.perf_counter() - start, "points": count}


def incremental_ours(folder: Path, as_tensor: bool, scalars: int) -> dict[str, float]:
    from guarded_sbatch.sources.tensorboard import TensorBoardSource

    source = TensorBoardSource(folder)
    while source.read_new(max_points=50_000):
        pass
    append_events(folder, scalars // len(TAGS) + 1, as_tensor)
    start = time.perf_counter()
    count = len(source.read_new())
    return {"seconds": time.perf_counter() - start, "points": count}


def incremental_accumulator(folder: Path, as_tensor: bool, scalars: int) -> dict[str, float]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    accumulator.Reload()
    append_events(folder, scalars // len(TAGS) + 1, as_tensor)
    start = time.perf_counter()
    accumulator.Reload()
    return {"seconds": time.perf_counter() - start, "points": APPENDED_EVENTS}


def child(args: argparse.Namespace) -> None:
    folder = Path(args.folder)
    measures = {
        "ours": lambda: read_ours(folder, streamed=True),
        "ours-one-list": lambda: read_ours(folder, streamed=False),
        "accumulator": lambda: read_accumulator(folder),
        "tbparse": lambda: read_tbparse(folder),
        "ours-incremental": lambda: incremental_ours(folder, args.tensor, args.scalars),
        "accumulator-incremental": lambda: incremental_accumulator(folder, args.tensor, args.scalars),
    }
    result = measures[args.child]()
    result["peak_rss_mb"] = _peak_rss_mb()
    print(json.dumps(result))


def run_child(name: str, folder: Path, scalars: int, as_tensor: bool) -> dict[str, float]:
    argv = [sys.executable, __file__, "--child", name, "--folder", str(folder), "--scalars", str(scalars)]
    if as_tensor:
        argv.append("--tensor")
    # The bench measures other programs on purpose; runner.run_command's text capture is fine here.
    from guarded_sbatch.core.runner import run_command

    out = run_command(argv, timeout=1800)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scalars", type=int, default=1_000_000)
    parser.add_argument("--tensor", action="store_true", help="write rank-0 float_val tensors, not simple_value")
    parser.add_argument("--skip-slow", action="store_true", help="skip EventAccumulator and tbparse")
    parser.add_argument("--child")
    parser.add_argument("--folder")
    args = parser.parse_args()
    if args.child:
        child(args)
        return

    from guarded_sbatch.sources.tfrecord import CRC32C_IMPLEMENTATION

    work = Path(tempfile.mkdtemp(prefix="bench-tb-"))
    try:
        start = time.perf_counter()
        write_file(work / "run", args.scalars, args.tensor)
        size_mb = sum(p.stat().st_size for p in (work / "run").iterdir()) / 1e6
        print(f"wrote {args.scalars:,} {'tensor' if args.tensor else 'simple_value'} scalars "
              f"({size_mb:.1f} MB) in {time.perf_counter() - start:.1f} s; crc32c: {CRC32C_IMPLEMENTATION}")
        names = ["ours", "ours-one-list"] + ([] if args.skip_slow else ["accumulator", "tbparse"])
        results: dict[str, dict[str, float]] = {}
        for name in names:
            results[name] = run_child(name, work / "run", args.scalars, args.tensor)
        for name in ["ours-incremental"] + ([] if args.skip_slow else ["accumulator-incremental"]):
            copy = work / name
            shutil.copytree(work / "run", copy)
            results[name] = run_child(name, copy, args.scalars, args.tensor)
            shutil.rmtree(copy)
        base = results["ours"]["seconds"]
        print(f"{'reader':<26}{'seconds':>10}{'points':>12}{'peak RSS MB':>13}{'x ours':>9}")
        for name, result in results.items():
            ratio = result["seconds"] / base if not name.endswith("incremental") else float("nan")
            print(f"{name:<26}{result['seconds']:>10.3f}{int(result['points']):>12,}"
                  f"{result['peak_rss_mb']:>13.1f}{ratio:>9.1f}")
        if "accumulator" in results:
            print(f"full read: EventAccumulator / ours = {results['accumulator']['seconds'] / base:.1f}x; "
                  f"tbparse / ours = {results['tbparse']['seconds'] / base:.1f}x")
            print(f"incremental after {APPENDED_EVENTS} events: ours "
                  f"{results['ours-incremental']['seconds'] * 1000:.1f} ms, EventAccumulator "
                  f"{results['accumulator-incremental']['seconds'] * 1000:.1f} ms")
        else:
            print(f"incremental after {APPENDED_EVENTS} events: ours "
                  f"{results['ours-incremental']['seconds'] * 1000:.1f} ms")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
