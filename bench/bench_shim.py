"""What the sbatch shim adds to a non-training submission: 100 `sbatch --hold --wrap hostname` calls straight to
the real sbatch and 100 through shims/sbatch (with the guarded-sbatch module's environment), interleaved, on the
dev Slurm. Prints the per-call medians and their difference; the target is <= 20 ms added. Cancels every job.

    .venv/bin/python bench/bench_shim.py [--calls 100]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def timed(argv: list[str], env: dict[str, str], cwd: str) -> tuple[float, str]:
    start = time.perf_counter()
    out = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=60)
    elapsed = time.perf_counter() - start
    if out.returncode != 0:
        raise SystemExit(f"{argv} failed: {out.stderr.strip()}")
    return elapsed, out.stdout.strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=100)
    args = parser.parse_args()
    real = shutil.which("sbatch")
    if real is None:
        raise SystemExit("no sbatch on PATH: start the dev Slurm (scripts/dev-slurm up)")
    env = {**os.environ, "GUARDED_SBATCH_REAL_SBATCH": real, "GUARDED_SBATCH_PYTHON": sys.executable}
    cwd = tempfile.mkdtemp(prefix="bench-shim-")
    direct: list[float] = []
    shimmed: list[float] = []
    jobs: list[str] = []
    command = ["--hold", "--parsable", "--job-name=bench-shim", "-o", "/dev/null", "--wrap", "hostname"]
    for _ in range(args.calls):
        seconds, job = timed([real, *command], env, cwd)
        direct.append(seconds)
        jobs.append(job)
        seconds, job = timed([str(REPO / "shims" / "sbatch"), *command], env, cwd)
        shimmed.append(seconds)
        jobs.append(job)
    subprocess.run(["scancel", *jobs], timeout=60, check=False)
    median_direct = statistics.median(direct) * 1000
    median_shim = statistics.median(shimmed) * 1000
    print(f"{args.calls} non-training `sbatch --wrap hostname` calls each way, interleaved, on the dev Slurm")
    print(f"  real sbatch:         median {median_direct:7.1f} ms  (p90 {statistics.quantiles(direct, n=10)[-1] * 1000:.1f})")
    print(f"  through the shim:    median {median_shim:7.1f} ms  (p90 {statistics.quantiles(shimmed, n=10)[-1] * 1000:.1f})")
    print(f"  added by the shim:   median {median_shim - median_direct:7.1f} ms per call (target <= 20 ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
