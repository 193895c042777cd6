"""Benchmark: what the own-folder pre-flight check costs on the login node as the registry of runs grows.

    PYTHONPATH=wrapper .venv/bin/python bench/bench_own_folder.py [--runs 10,1000,5000] [--repeat 5]

A registry of N finished-looking runs (each with its recorded TensorBoard folder; one in ten shares this run's
folder, so its job state is asked of the local scheduler, which answers COMPLETED), then the check on the example
project's launch. Anchor, measured in the same run: `list_runs()` alone (reading the registry, which status does
too), and the whole pre-flight of the same launch. Prints medians in milliseconds; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "wrapper"))


def _registry(root: Path, runs: int, shared: str) -> None:
    from guarded_sbatch.core.fsutil import write_json_atomic
    from guarded_sbatch.records.registry import create_run
    from guarded_sbatch.scheduler.local import LocalScheduler

    jobs = LocalScheduler(root / "state" / "local-jobs")
    for index in range(runs):
        folder = shared if index % 10 == 0 else str(root / "project" / "runs" / f"other-{index}")
        job_id = str(index + 1)
        (jobs.root / job_id).mkdir(parents=True)
        write_json_atomic(jobs.root / job_id / "spec.json", {"name": f"r{index}", "owner": "u", "work_dir": "/",
                                                             "stdout_path": "", "time_limit_s": None})
        write_json_atomic(jobs.root / job_id / "job.json", {"state": "COMPLETED"})
        create_run(f"synthetic-old-run-{index}", "local", job_id, sources={"specs": [{"kind": "tensorboard", "locator": folder}]})


def _median_ms(action, repeat: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default="10,1000,5000")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    from guarded_sbatch.core.config import Config
    from guarded_sbatch.records.registry import list_runs
    from guarded_sbatch.sbatch.argv import split_sbatch_argv
    from guarded_sbatch.launch.checks.own_folder import check_own_folder
    from guarded_sbatch.launch.context import PreflightContext
    from guarded_sbatch.launch.preflight import run_preflight
    from guarded_sbatch.scheduler.local import LocalScheduler

    print(f"{'runs':>6}  {'list_runs (anchor)':>18}  {'own-folder check':>16}  {'whole pre-flight':>16}  verdict")
    for count in (int(n) for n in args.runs.split(",")):
        root = Path(tempfile.mkdtemp(prefix="bench-own-folder-"))
        try:
            shutil.copytree(REPO / "examples" / "tiny_mlp", root / "project",
                            ignore=shutil.ignore_patterns("events.out.tfevents.*", "__pycache__"))
            os.environ["GUARDED_SBATCH_STATE_DIR"] = str(root / "state")
            _registry(root, count, str(root / "project" / "runs" / "synthetic-tanh-mlp-bs64-lr5e-2"))
            scheduler = LocalScheduler(root / "state" / "local-jobs")
            launch = split_sbatch_argv(["train.sh"])
            env = {"PATH": os.environ.get("PATH", "")}
            report = run_preflight(launch, Config(), scheduler, cwd=root / "project", env=env)
            captured: list[PreflightContext] = []

            def whole() -> None:
                run_preflight(launch, Config(), scheduler, cwd=root / "project", env=env)

            import guarded_sbatch.launch.preflight as preflight

            original = preflight.CHECKS
            preflight.CHECKS = (*original[:-1], lambda context: (captured.append(context), original[-1](context))[1])
            whole()
            preflight.CHECKS = original
            context = captured[0]
            anchor = _median_ms(list_runs, args.repeat)
            check = _median_ms(lambda: check_own_folder(context), args.repeat)
            full = _median_ms(whole, args.repeat)
            verdict = next(r.status.value for r in report.results if r.name == "own-folder")
            print(f"{count:>6}  {anchor:>15.1f} ms  {check:>13.1f} ms  {full:>13.1f} ms  {verdict}")
        finally:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
