"""CPU (user + sys, the process and the children it waited for) of each common start of the tool: `--help` of every
subcommand, `check train.sh`, a local launch, `status`, `show RUN`, `monitor --once --log F`, the sidecar process
(`python -P -m guarded_sbatch sidecar RUN_DIR`, on a run that ended) and the evidence plot's child. Medians of
--repeat runs; with several --wrapper trees the runs alternate between them, so a load that comes and goes on a
shared machine weighs on each alike.

    python bench/bench_starts.py --wrapper /path/to/main/wrapper --wrapper wrapper [--repeat 5] [--bytecode-cache]

Without --bytecode-cache the environment decides (PYTHONDONTWRITEBYTECODE=1 makes every start compile the
package from source); with it, each tree's bytecode is cached in the temporary folder.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from bench_login import _wait_for_local_jobs

REPO = Path(__file__).resolve().parents[1]
RUN_NAME = "synthetic-tanh-mlp-bench0"
HELPS = ("check", "monitor", "show", "status", "kill", "restart", "admin", "run", "check-sweep", "stop", "reference",
         "sidecar")


def cpu_of(argv: list[str], *, cwd: Path, env: dict[str, str]) -> float:
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL)
    _, _, usage = os.wait4(proc.pid, 0)
    proc.returncode = 0  # reaped above
    return usage.ru_utime + usage.ru_stime


def plot_input(path: Path, env: dict[str, str]) -> None:
    """A diverging run's plot input (actions/evidence_plot.plot_input), as the sidecar writes it."""
    code = f"""
import json, math
from guarded_sbatch.actions.evidence_plot import plot_input
from guarded_sbatch.judge.verdict import Anomaly, Decision, Reason, Verdict
steps = list(range(400))
loss = [2 * math.exp(-s / 100) if s < 300 else (10 ** ((s - 300) / 5) if s < 350 else float("nan")) for s in steps]
series = {{"train/loss": (steps, loss), "train/lr": (steps, [0.05 * (1 - s / 400) for s in steps]),
          "train/grad_norm": (steps, [1.0 + max(0, s - 300) for s in steps]),
          "eval/loss": (steps[::20], [1.5 * math.exp(-s / 120) for s in steps[::20]])}}
verdict = Verdict(Decision.STOP, Reason.NON_FINITE_LOSS, "nan", (Anomaly("loss_spike", "train/loss", 310),), 380, {{}})
open({str(path)!r}, "w").write(json.dumps(plot_input(series, verdict, "{RUN_NAME}")))
"""
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wrapper", type=Path, action="append", help="a package tree to measure (repeatable)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--bytecode-cache", action="store_true", help="cache each tree's bytecode (see above)")
    parser.add_argument("--only", default="", help="comma-separated parts of the names of the starts to measure")
    args = parser.parse_args()
    trees = [p.resolve() for p in (args.wrapper or [REPO / "wrapper"])]
    with tempfile.TemporaryDirectory(prefix="bench-starts-") as tmp_name:
        tmp = Path(tmp_name)
        root = tmp / "project"
        shutil.copytree(REPO / "examples" / "tiny_mlp", root,
                        ignore=shutil.ignore_patterns("events.out.tfevents.*", "__pycache__", "runs"))
        base = {**os.environ, "GUARDED_SBATCH_STATE_DIR": str(tmp / "state"), "GUARDED_SBATCH_BACKEND": "local",
                "COLUMNS": "100", "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
        base.pop("GUARDED_SBATCH_USER_CONFIG", None)
        envs = {}
        for index, tree in enumerate(trees):
            envs[tree] = {**base, "PYTHONPATH": str(tree)}
            if args.bytecode_cache:
                envs[tree].pop("PYTHONDONTWRITEBYTECODE", None)
                envs[tree]["PYTHONPYCACHEPREFIX"] = str(tmp / f"pycache-{index}")
        first = envs[trees[0]]
        me = [sys.executable, "-m", "guarded_sbatch"]
        subprocess.run([*me, "--job-name", RUN_NAME, "--wait", "--quiet", "train.sh", "--steps", "30", "--step-seconds",
                        "0", "--logdir", "runs/bench0"], cwd=root, env=first, check=True, timeout=300)
        run_dir = next((tmp / "state" / "runs").glob(f"{RUN_NAME}-*"))
        job_log = next(root.glob("slurm-*.out"))
        plot_input(tmp / "plot.json", first)
        launched = iter(range(10 ** 6))
        one_pass = tmp / "sidecar-run"

        def fresh_sidecar() -> None:  # the run's folder before its sidecar's last pass
            shutil.rmtree(one_pass, ignore_errors=True)
            shutil.copytree(run_dir, one_pass)
            (one_pass / "sidecar-state.json").unlink()

        def launch() -> list[str]:
            n = next(launched)
            return [*me, "--job-name", f"synthetic-tanh-mlp-l{n}", "--quiet", "train.sh", "--steps", "3",
                    "--step-seconds", "0", "--logdir", f"runs/l{n}"]

        starts: list[tuple[str, Callable[[], list[str]], Callable[[], None] | None]] = [
            ("--version", lambda: [*me, "--version"], None), ("--help", lambda: [*me, "--help"], None),
            *[(f"{c} --help", lambda c=c: [*me, c, "--help"], None) for c in HELPS],
            ("check train.sh", lambda: [*me, "check", "train.sh"], None),
            ("status", lambda: [*me, "status"], None),
            ("show RUN", lambda: [*me, "show", RUN_NAME], None),
            ("monitor --once --log F", lambda: [*me, "monitor", "--once", "--log", str(job_log)], None),
            ("sidecar (a finished run)", lambda: [sys.executable, "-P", "-m", "guarded_sbatch", "sidecar",
                                                  str(run_dir)], None),
            ("sidecar (an ended job, one pass)", lambda: [sys.executable, "-P", "-m", "guarded_sbatch", "sidecar",
                                                          str(one_pass)], fresh_sidecar),
            ("evidence plot child", lambda: [sys.executable, "-m", "guarded_sbatch.actions.evidence_plot",
                                             str(tmp / "plot.json"), str(tmp / "plot.png")],
             lambda: (tmp / "plot.png").unlink(missing_ok=True)),
            ("launch train.sh (local)", launch, None),  # last: its jobs add runs to what status lists
        ]
        wanted = [part for part in args.only.split(",") if part]
        print(f"CPU seconds (user+sys), median of {args.repeat}; columns: " + ", ".join(map(str, trees)))
        for name, argv, prepare in starts:
            if wanted and not any(part in name for part in wanted):
                continue
            times: dict[Path, list[float]] = {tree: [] for tree in trees}
            for _ in range(args.repeat):
                for tree in trees:
                    if prepare is not None:
                        prepare()
                    times[tree].append(cpu_of(argv(), cwd=root, env=envs[tree]))
            medians = [statistics.median(times[tree]) for tree in trees]
            change = f"  ({medians[-1] - medians[0]:+.3f})" if len(trees) > 1 else ""
            print(f"  {name:<34}" + "".join(f"{m:8.3f}" for m in medians) + change, flush=True)
        _wait_for_local_jobs(tmp / "state" / "local-jobs")  # the launches' jobs, before their folder goes
    return 0


if __name__ == "__main__":
    sys.exit(main())
