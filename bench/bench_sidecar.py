"""Benchmark: the sidecar on the dev Slurm with its DEFAULT settings (fast poll 60 s, scheduler poll 300 s).

    .venv/bin/python bench/bench_sidecar.py [--runs 3] [--watch-minutes 0]

Each run launches the tiny_mlp example through the CLI (a real training job and a real sidecar job),
made to diverge at a random moment. The bench watches the event file itself (every 0.2 s) and
notes when the first non-finite loss is on disk; the scancel time is the training job's end time
from Slurm. The sidecar records its own peak RSS (VmHWM), CPU time and scheduler calls at exit
(state file). With --watch-minutes M a healthy run is also watched for M minutes, to count the
scheduler calls of a sidecar that only watches. Prints the figures against the targets and a naive
anchor (squeue every 60 s). Not part of the test suite; takes a few minutes; asserts nothing.
"""

from __future__ import annotations

import argparse
import math
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "wrapper"))
sys.path.insert(0, str(REPO / "tests"))

from e2e_helpers import Project, make_project, submitted_job_id  # noqa: E402
from guarded_sbatch.scheduler.slurm import SlurmScheduler  # noqa: E402
from guarded_sbatch.sidecar.state import SidecarState  # noqa: E402
from guarded_sbatch.sources.tensorboard import TensorBoardSource  # noqa: E402

TB = "runs/synthetic-tanh-mlp-bs64-lr5e-2"
STEP_S = 0.03
TARGET_LATENCY_S, TARGET_RSS_MB, NAIVE_CALLS_PER_H = 90.0, 80.0, 60.0


def launch(project: Project, *train_args: str) -> tuple[str, str, Path]:
    name = f"synthetic-tanh-mlp-bs64-lr5e-2-{uuid.uuid4().hex[:6]}"
    result = project.cli("--guard-backend", "slurm", "--guard-tb", TB, "--job-name", name, "train.sh", *train_args)
    if result.returncode != 0:
        raise SystemExit(f"launch failed:\n{result.stderr}")
    job_id = submitted_job_id(result.stdout)
    record = project.run_record(job_id)
    return job_id, record["sidecar_id"], project.state_dir / "runs" / record["run_id"]


def wait_terminal(slurm: SlurmScheduler, job_id: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not slurm.state(job_id).is_terminal:
        if time.monotonic() > deadline:
            raise SystemExit(f"job {job_id} did not end within {timeout_s:.0f} s")
        time.sleep(1)


def sdiag_rpc_total() -> int | None:
    """All RPCs slurmctld served since its last restart/reset (every client on the cluster)."""
    try:
        text = subprocess.run(["sdiag"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    section = text.split("Remote Procedure Call statistics by message type", 1)[-1].split(
        "Remote Procedure Call statistics by user"
    )[0]
    counts = [int(m) for m in re.findall(r"count:(\d+)", section)]
    return sum(counts) if counts else None


def sacct_max_rss_mb(job_id: str) -> float | None:
    text = subprocess.run(["sacct", "-n", "-P", "-j", job_id, "-o", "MaxRSS"], capture_output=True, text=True, timeout=30).stdout
    values = []
    for word in text.split():
        match = re.fullmatch(r"([\d.]+)([KMG]?)", word)
        if match:
            values.append(float(match[1]) * {"": 1 / 1024**2, "K": 1 / 1024, "M": 1, "G": 1024}[match[2]])
    return max(values) if values else None


def one_nan_run(slurm: SlurmScheduler, workdir: Path, index: int) -> dict[str, float | int | str | None]:
    project = make_project(workdir / f"run{index}", fast_interval=60.0, job_poll=300.0)
    diverge_s = random.uniform(40, 100)  # a random phase against the sidecar's 60-s polls
    diverge_at = int(diverge_s / STEP_S)
    job_id, sidecar_id, run_dir = launch(
        project,
        "--steps",
        str(diverge_at + 20000),
        "--step-seconds",
        str(STEP_S),
        "--diverge-at",
        str(diverge_at),
        "--flush-secs",
        "1",
    )
    source = TensorBoardSource(project.root / TB)
    nan_on_disk: float | None = None
    nan_logged: float | None = None
    tick = 0
    while tick % 10 or not slurm.state(job_id).is_terminal:  # the file every 0.2 s, squeue every 2 s
        for point in source.read_new():
            if nan_on_disk is None and point.key == "train/loss" and not math.isfinite(point.value):
                nan_on_disk, nan_logged = time.time(), point.wall_time
        time.sleep(0.2)
        tick += 1
    training = slurm.info(job_id)
    wait_terminal(slurm, sidecar_id, 180)
    state = SidecarState.load(run_dir / "sidecar-state.json")
    output = project.sidecar_output(job_id)
    end = training.end_time
    return {
        "job": job_id,
        "sidecar": sidecar_id,
        "final": training.state.value,
        "reason": state.last_reason,
        "latency_s": (end - nan_on_disk) if end and nan_on_disk else None,
        "flush_lag_s": (nan_on_disk - nan_logged) if nan_on_disk and nan_logged else None,
        "peak_rss_mb": state.peak_rss_mb,
        "sacct_max_rss_mb": sacct_max_rss_mb(sidecar_id),
        "cpu_s": state.cpu_seconds,
        "polls": state.checks,
        "scheduler_calls": state.scheduler_calls,
        "watched_s": (end - state.started_at) if end else None,
        "final_summaries": output.count("FINAL_SUMMARY"),
    }


def healthy_watch(slurm: SlurmScheduler, workdir: Path, minutes: float) -> dict[str, float | int]:
    project = make_project(workdir / "healthy", fast_interval=60.0, job_poll=300.0)
    steps = int(minutes * 60 / STEP_S)
    job_id, sidecar_id, run_dir = launch(project, "--steps", str(steps), "--step-seconds", str(STEP_S))
    wait_terminal(slurm, job_id, minutes * 60 * 2 + 120)
    wait_terminal(slurm, sidecar_id, 180)
    state = SidecarState.load(run_dir / "sidecar-state.json")
    training = slurm.info(job_id)
    watched = (training.end_time or time.time()) - state.started_at
    return {
        "watched_s": watched,
        "scheduler_calls": state.scheduler_calls,
        "polls": state.checks,
        "cpu_s": state.cpu_seconds,
        "peak_rss_mb": state.peak_rss_mb,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--watch-minutes", type=float, default=0.0, help="also watch a healthy run this long")
    args = parser.parse_args()
    slurm = SlurmScheduler()
    rpc_before = sdiag_rpc_total()
    started = time.time()
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-sidecar-") as tmp:
        for index in range(args.runs):
            result = one_nan_run(slurm, Path(tmp), index)
            results.append(result)
            print(f"run {index + 1}: {result}", flush=True)
        healthy = healthy_watch(slurm, Path(tmp), args.watch_minutes) if args.watch_minutes > 0 else None
    rpc_after = sdiag_rpc_total()
    elapsed = time.time() - started

    latencies = [float(r["latency_s"]) for r in results if r["latency_s"] is not None]
    rss = [float(r["peak_rss_mb"]) for r in results if r["peak_rss_mb"]]
    cpu_per_poll = [1000 * float(r["cpu_s"]) / max(1, int(r["polls"])) for r in results]
    print("\n== sidecar with default settings (fast poll 60 s, scheduler poll 300 s) ==")
    if latencies:
        median = statistics.median(latencies)
        print(
            f"NaN on disk -> scancel: median {median:.1f} s over {len(latencies)} runs "
            f"(each: {', '.join(f'{x:.1f}' for x in latencies)}); target <= {TARGET_LATENCY_S:.0f} s: "
            f"{'met' if median <= TARGET_LATENCY_S else 'MISSED'}; naive anchor (squeue + judge every 60 s): ~30 s "
            "median, 60 s worst"
        )
    else:
        print("NaN on disk -> scancel: no run produced a measurable latency")
    if rss:
        print(
            f"sidecar peak RSS (VmHWM at exit): max {max(rss):.1f} MB; target <= {TARGET_RSS_MB:.0f} MB: "
            f"{'met' if max(rss) <= TARGET_RSS_MB else 'MISSED'}; sacct MaxRSS (sampled every 30 s): "
            f"{[r['sacct_max_rss_mb'] for r in results]}"
        )
    print(
        f"sidecar CPU per poll: median {statistics.median(cpu_per_poll):.0f} ms (whole process CPU / polls, "
        "imports and the STOP's actions included)"
    )
    for r in results:
        print(
            f"  job {r['job']}: {r['scheduler_calls']} scheduler calls in {r['watched_s']:.0f} s watched "
            f"(start: state + watch step; STOP: info + cancel + state until gone)"
        )
    steady = 3600 / 300
    print(
        f"slurmctld calls per hour while watching: {steady:.0f} by design (one state query per 300 s; the job's "
        f"end comes from the idle watch step) vs naive anchor {NAIVE_CALLS_PER_H:.0f}/h (squeue every 60 s)"
    )
    if healthy:
        per_hour = healthy["scheduler_calls"] / healthy["watched_s"] * 3600
        print(
            f"healthy run watched {healthy['watched_s']:.0f} s: {healthy['scheduler_calls']} scheduler calls "
            f"({per_hour:.1f}/h including start and end), peak RSS {healthy['peak_rss_mb']:.1f} MB"
        )
    if rpc_before is not None and rpc_after is not None:
        print(
            f"sdiag: {rpc_after - rpc_before} RPCs served in {elapsed:.0f} s by slurmctld for EVERY client "
            "(this bench's CLI and its own squeue polls, other users' jobs): an upper bound, not the sidecar's"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
