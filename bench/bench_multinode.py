"""Benchmark: a 2-node torchrun job on the multi-node dev Slurm (scripts/dev-slurm up), from NaN to every process gone.

    .venv/bin/python bench/bench_multinode.py [--runs 2] [--fast-interval 2]

Each run launches examples/ddp_tiny through the CLI on 2 compute nodes x 1 process (gloo, CPU), its sidecar on a
service node (site_configs/dev-multinode.toml), with the weights turned NaN at step 80. The bench notes when
rank 0 says it injected the NaN (its unix time in the job's log), when the sidecar asked for the stop (its state
file), and when the last process of the run (srun, the torchrun agents, the workers: each names train.py) left
the namespaces of the nodes, polled by pid every 0.05 s. Anchor, measured in the same run: a healthy 2-node job
of the same shape ended by a plain `scancel` (the floor: Slurm's own teardown of a 2-node step). Not part of
the test suite; about 30 s a run; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "wrapper"))
sys.path.insert(0, str(REPO / "tests"))

from e2e_helpers import Project, submitted_job_id  # noqa: E402
from multinode_helpers import (  # noqa: E402
    CONFIG, TWO_NODES, ddp_project, multinode_layout, trainers_on, unique_name,
)

NAN_AT = 80
STEP_S = 0.1


def launch(project: Project, *extra: str) -> str:
    result = project.cli("--guard-backend", "slurm", "--guard-waive", "eta=benchmark", *TWO_NODES, "--time", "00:10:00",
                         "--job-name", unique_name("bench"), "torchrun", "--nproc-per-node", "1", "train.py",
                         "--config", CONFIG, "--steps", "3000", "--step-seconds", str(STEP_S), *extra)
    if result.returncode != 0:
        raise SystemExit(f"launch failed: {result.stderr[-2000:]}")
    return submitted_job_id(result.stdout)


def wait(predicate, timeout: float, interval: float, what: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(interval)
    raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")


def gone_at(nodes: tuple[str, ...], root: Path, timeout: float = 120) -> float:
    wait(lambda: not trainers_on(nodes, root), timeout, 0.05, "every process of the run to end")
    return time.time()


def one_run(tmp: Path, index: int, nodes: tuple[str, ...], fast_interval: float) -> dict[str, float]:
    anchor = ddp_project(tmp / f"anchor-{index}", fast_interval=fast_interval)
    job = launch(anchor)
    wait(lambda: len(trainers_on(nodes, anchor.root)) == 2, 120, 0.2, "the anchor's trainers on 2 nodes")
    time.sleep(3)
    cancelled_at = time.time()
    subprocess.run(["scancel", job], check=True, capture_output=True, timeout=30)
    anchor_s = gone_at(nodes, anchor.root) - cancelled_at

    project = ddp_project(tmp / f"nan-{index}", fast_interval=fast_interval)
    job = launch(project, "--nan-at", str(NAN_AT))
    log = project.root / f"slurm-{job}.out"
    injected = wait(lambda: re.search(r"nan injected at step \d+ \(unix time ([\d.]+)\)",
                                      log.read_text(errors="replace") if log.exists() else ""), 180, 0.1, "the NaN")
    nan_at = float(injected.group(1))
    ended = gone_at(nodes, project.root)
    state_file = next((project.state_dir / "runs").glob(f"*-{job}/sidecar-state.json"))
    stop_at = float(wait(lambda: json.loads(state_file.read_text()).get("stop_requested_at"), 60, 0.2, "the stop"))
    return {"nan_to_stop": stop_at - nan_at, "stop_to_gone": ended - stop_at, "nan_to_gone": ended - nan_at,
            "anchor_scancel_to_gone": anchor_s}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--fast-interval", type=float, default=2.0, help="the sidecar's metric poll (default 60 s in production)")
    args = parser.parse_args()
    layout = multinode_layout()
    nodes = (*layout.compute, *layout.service)
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-multinode-", dir="/tmp") as tmp:
        for index in range(args.runs):
            results.append(one_run(Path(tmp), index, nodes, args.fast_interval))
            print(f"run {index + 1}: " + ", ".join(f"{k} {v:.2f} s" for k, v in results[-1].items()), flush=True)
    print(f"\n2-node torchrun job (2 x 1 process, gloo), sidecar on a service node polling every {args.fast_interval:g} s, "
          f"{args.runs} run(s), medians:")
    for key, label in (("nan_to_stop", "NaN injected (rank 0) -> sidecar asks for the stop"),
                       ("stop_to_gone", "stop asked -> every process gone on every node"),
                       ("nan_to_gone", "NaN -> every process gone on every node"),
                       ("anchor_scancel_to_gone", "anchor: plain scancel -> every process gone")):
        print(f"  {label:<52} {statistics.median(r[key] for r in results):7.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
