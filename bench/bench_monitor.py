"""Benchmark: one shared monitor process watching N runs, each logging 10 points/s.

    PYTHONPATH=wrapper .venv/bin/python bench/bench_monitor.py [--runs 1,10,100,200] [--minutes 3]
        [--fast-interval 60] [--job-poll 300] [--nan-fraction 0.1]

One writer process appends TensorBoard events for every run (5 steps/s x train/loss and train/lr = 10
points/s per run); a fraction of the runs turns NaN at a random moment. The monitor (sidecar.shared_monitor,
the code the monitor job runs) watches them in its own process with a stand-in scheduler that
answers like Slurm and counts every call that would reach slurmctld, and cancels by writing a file
the writer obeys. Measured per N: CPU seconds per minute and peak RSS of the monitor process, the
NaN-to-scancel latency (first NaN written -> cancel), the scheduler calls; then the per-job vs shared
comparison for N runs. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "wrapper"))

STEPS_PER_S = 5
TAGS = ("train/loss", "train/lr")


def writer(root: Path, runs: int, seconds: float, nan_fraction: float, seed: int) -> None:
    """Append events to every run's file at 5 steps/s; broken runs go NaN at a random time."""
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.summary.writer.record_writer import RecordWriter

    rng = random.Random(seed)
    broken = set(rng.sample(range(runs), max(1, round(runs * nan_fraction))))
    nan_at = {i: time.time() + rng.uniform(0.25, 0.6) * seconds for i in broken}
    handles = []
    for i in range(runs):
        folder = root / f"run{i:03d}" / "tb"
        folder.mkdir(parents=True, exist_ok=True)
        handle = open(folder / f"events.out.tfevents.{int(time.time())}.bench", "ab")
        handles.append((handle, RecordWriter(handle)))
    first_nan: dict[str, float] = {}
    start = time.time()
    step = 0
    while time.time() - start < seconds:
        step += 1
        now = time.time()
        for i, (handle, record_writer) in enumerate(handles):
            if (root / f"run{i:03d}" / "cancelled").exists():
                continue
            nan = i in nan_at and now >= nan_at[i]
            if nan and str(i) not in first_nan:
                first_nan[str(i)] = now
            loss = float("nan") if nan else 2.0 / (1 + step / 500) + 0.02 * rng.random()
            for tag, value in zip(TAGS, (loss, 1e-3)):
                event = Event(wall_time=now, step=step, summary=Summary(value=[Summary.Value(tag=tag, simple_value=value)]))
                record_writer.write(event.SerializeToString())
            handle.flush()
        time.sleep(max(0.0, start + step / STEPS_PER_S - time.time()))
    (root / "first_nan.json").write_text(json.dumps(first_nan))


class StandInSlurm:
    """Answers like SlurmScheduler; every method call is one call to slurmctld."""

    name = "slurm"
    free_state_queries = False
    process_groups_here = False
    supports_requeue = False

    def __init__(self, root: Path) -> None:
        from guarded_sbatch.scheduler.interface import JobState

        self.root = root
        self.calls = {"states": 0, "state": 0, "info": 0, "cancel": 0}
        self.cancelled: dict[str, float] = {}
        self.JobState = JobState

    def _state(self, job_id: str):  # type: ignore[no-untyped-def]
        return self.JobState.CANCELLED if job_id in self.cancelled else self.JobState.RUNNING

    def states(self, job_ids: list[str]):  # type: ignore[no-untyped-def]
        self.calls["states"] += 1
        return {job: self._state(job) for job in job_ids}

    def state(self, job_id: str):  # type: ignore[no-untyped-def]
        self.calls["state"] += 1
        return self._state(job_id)

    def info(self, job_id: str):  # type: ignore[no-untyped-def]
        from guarded_sbatch.scheduler.interface import JobInfo

        self.calls["info"] += 1
        return JobInfo(job_id, self._state(job_id), owner="me")

    def cancel(self, job_id: str, *, signal_name: str | None = None) -> None:
        self.calls["cancel"] += 1
        self.cancelled[job_id] = time.time()
        (self.root / f"run{int(job_id):03d}" / "cancelled").touch()

    def current_user(self) -> str:
        return "me"


def monitor_child(root: Path, runs: int, seconds: float, fast: float, job_poll: float) -> None:
    from guarded_sbatch.records import monitor_registry as registry
    from guarded_sbatch.sidecar.shared_monitor import SharedMonitor

    folder = root / "monitor"
    for i in range(runs):
        run_dir = root / f"run{i:03d}"
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "run.json").write_text(json.dumps({  # the run's record, as a launch writes it: its watcher's plan
            "run_id": f"run{i:03d}", "run_name": f"run{i:03d}", "backend": "slurm", "job_id": str(i),
            "tb_paths": [str(run_dir / "tb")], "watch": {"sidecar": {"fast_interval_s": fast, "job_poll_s": job_poll}}}))
        registry.register_run(folder, str(i), {"run_dir": str(run_dir), "run_name": f"run{i:03d}"})
    scheduler = StandInSlurm(root)
    monitor = SharedMonitor(folder, scheduler, io.StringIO())  # type: ignore[arg-type]
    monitor.poll(time.time())
    end = time.time() + seconds
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu0 = usage.ru_utime + usage.ru_stime
    started = time.time()
    polls = []
    while time.time() < end:
        before = time.time()
        u = resource.getrusage(resource.RUSAGE_SELF)
        c = u.ru_utime + u.ru_stime
        monitor.poll(before)
        u = resource.getrusage(resource.RUSAGE_SELF)
        polls.append((u.ru_utime + u.ru_stime) - c)
        time.sleep(max(0.0, min(end, before + fast) - time.time()))
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu = usage.ru_utime + usage.ru_stime - cpu0
    elapsed = time.time() - started
    with open("/proc/self/status", encoding="ascii") as handle:
        peak = next(int(line.split()[1]) / 1024 for line in handle if line.startswith("VmHWM:"))
    print(json.dumps({"cpu_s": cpu, "elapsed_s": elapsed, "peak_rss_mb": peak, "calls": scheduler.calls,
                      "cancelled": {k: v for k, v in scheduler.cancelled.items()}, "polls": len(polls),
                      "max_poll_cpu_s": max(polls) if polls else 0.0}))


def measure(runs: int, minutes: float, fast: float, job_poll: float, nan_fraction: float) -> dict:
    root = Path(tempfile.mkdtemp(prefix=f"bench-monitor-{runs}-"))
    seconds = minutes * 60
    try:
        env = {**os.environ, "PYTHONPATH": str(REPO / "wrapper")}
        write = subprocess.Popen([sys.executable, __file__, "--child", "writer", "--root", str(root), "--runs",
                                  str(runs), "--seconds", str(seconds + 5), "--nan-fraction", str(nan_fraction)], env=env)
        time.sleep(2)
        watch = subprocess.run([sys.executable, __file__, "--child", "monitor", "--root", str(root), "--runs", str(runs),
                                "--seconds", str(seconds), "--fast-interval", str(fast), "--job-poll", str(job_poll)],
                               env=env, capture_output=True, text=True, timeout=seconds + 600)
        write.wait(timeout=120)
        result = json.loads(watch.stdout.strip().splitlines()[-1])
        first_nan = json.loads((root / "first_nan.json").read_text())
        latencies = [result["cancelled"][job] - first_nan[job] for job in result["cancelled"] if job in first_nan]
        result["latencies_s"] = latencies
        result["nan_runs"] = len(first_nan)
        return result
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", default="1,10,100,200")
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--fast-interval", type=float, default=60.0)
    parser.add_argument("--job-poll", type=float, default=300.0)
    parser.add_argument("--nan-fraction", type=float, default=0.1)
    parser.add_argument("--child")
    parser.add_argument("--root")
    parser.add_argument("--seconds", type=float)
    args = parser.parse_args()
    if args.child == "writer":
        writer(Path(args.root), int(args.runs), args.seconds, args.nan_fraction, seed=int(args.runs))
        return
    if args.child == "monitor":
        monitor_child(Path(args.root), int(args.runs), args.seconds, args.fast_interval, args.job_poll)
        return
    print(f"{'runs':>5}{'CPU s/min':>11}{'% core':>8}{'peak RSS MB':>13}{'polls':>7}{'max poll s':>11}"
          f"{'NaN runs':>9}{'stopped':>8}{'median NaN->scancel s':>23}{'sched calls':>12}")
    for runs in [int(n) for n in args.runs.split(",")]:
        r = measure(runs, args.minutes, args.fast_interval, args.job_poll, args.nan_fraction)
        per_min = r["cpu_s"] / (r["elapsed_s"] / 60)
        median = statistics.median(r["latencies_s"]) if r["latencies_s"] else float("nan")
        print(f"{runs:>5}{per_min:>11.2f}{100 * per_min / 60:>7.1f}%{r['peak_rss_mb']:>13.1f}{r['polls']:>7}"
              f"{r['max_poll_cpu_s']:>11.2f}{r['nan_runs']:>9}{len(r['cancelled']):>8}{median:>23.1f}"
              f"  {json.dumps(r['calls'])}", flush=True)
    hours = 1.0
    print(f"\nper-job vs shared, for N runs over {hours:.0f} h at the default scheduler poll ({args.job_poll:.0f} s):")
    polls_per_hour = 3600 / args.job_poll
    for n in (200, 10_000):
        print(f"  N={n:>6}: jobs {2 * n} vs {n + -(-n // 200)}; sidecar CPU-hours {n * hours:.0f} vs "
              f"{-(-n // 200) * hours:.0f}; slurmctld calls/h {n * (polls_per_hour + 1):.0f} (12 polls + 1 watch step "
              f"each) vs {-(-n // 200) * polls_per_hour:.0f} (+1 scancel per STOP)")


if __name__ == "__main__":
    main()
