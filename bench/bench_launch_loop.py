"""Benchmark: what a guarded launch adds over plain sbatch, at the 1st and at the 100th launch of a loop from one
folder, and how many scheduler queries each launch makes (dev Slurm; run as a user who may submit).

    .venv/bin/python bench/bench_launch_loop.py [--launches 100] [--window 5] [--keep-live]

One project folder, one trivial job script (a `sleep`; every job is submitted `--hold` so nothing runs, and all are
cancelled at the end). Launch i is `guarded-sbatch --hold -J loop-bench-<tag>-<i> job.sh --logdir runs/<i> ...`
(as a shell loop over a sweep would), each beside a plain `sbatch --hold job.sh` timed just before it in the same
run: the anchor. By default each launch's jobs are cancelled right after it (the loop's history is of ended runs, as
in a day of sweeps); --keep-live leaves them queued (a history of live runs). Scheduler calls are counted by a PATH
shim that logs each squeue/sacct/scontrol/sbatch/scancel invocation made outside a job and runs the real command.
Prints, for the first and the last `window` launches: the median added time and the calls per launch, and
launch 1 and launch N alone. Asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parents[1]
QUERIES = ("squeue", "sacct", "scontrol")
COMMANDS = (*QUERIES, "sbatch", "scancel", "srun")

JOB = """#!/bin/bash
#SBATCH --time=00:05:00
#SBATCH --output=/dev/null
{python} sleep_train.py "$@"
"""

PROGRAM = """import sys, time

def writer(logdir):  # never called: the job only sleeps; the pre-flight sees a TensorBoard writer and its --logdir
    from torch.utils.tensorboard import SummaryWriter
    return SummaryWriter(logdir)

time.sleep(60)
"""


class Cost(NamedTuple):
    wall: float
    cpu: float


def _shim(folder: Path, log: Path) -> None:
    folder.mkdir(parents=True)
    for command in COMMANDS:
        real = shutil.which(command)
        if real is None:
            raise SystemExit(f"bench_launch_loop: `{command}` is not on PATH: this benchmark needs Slurm")
        path = folder / command
        path.write_text(f'#!/bin/sh\n[ -z "$SLURM_JOB_ID" ] && echo "{command} $*" >> {log}\nexec {real} "$@"\n')
        path.chmod(0o755)


def _timed(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[Cost, str]:
    """Wall time, and the CPU time of the command and its children (steadier than wall on a loaded machine)."""
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    after, elapsed = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter() - start
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    if done.returncode != 0:
        raise SystemExit(f"bench_launch_loop: {' '.join(argv[:4])} ... failed ({done.returncode}): "
                         f"{(done.stderr or done.stdout).strip()[-1500:]}")
    return Cost(elapsed, cpu), done.stdout + "\n" + done.stderr


def _job_ids(output: str) -> list[str]:
    """The jobs a launch submitted: sbatch --parsable's id, guarded-sbatch's training job and its watcher."""
    found = re.findall(r"^(\d+)$|(?:Submitted batch job|sidecar job|shared monitor job) (\d+)", output, re.M)
    return [plain or guarded for plain, guarded in found]


def _calls(log: Path) -> Counter[str]:
    lines = log.read_text().splitlines() if log.exists() else []
    log.unlink(missing_ok=True)
    return Counter(line.split()[0] for line in lines if line.strip())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launches", type=int, default=100)
    parser.add_argument("--window", type=int, default=5, help="launches at each end whose medians are printed")
    parser.add_argument("--waive", action="store_true", help="waive config-diff (a guarded-sbatch that blocks a "
                        "launch with no config file)")
    parser.add_argument("--keep-live", action="store_true", help="leave every launch's jobs queued (held) until the end")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-launch-loop-"))
    project, log = root / "project", root / "calls.log"
    project.mkdir()
    (project / "job.sh").write_text(JOB.format(python=sys.executable))
    (project / "sleep_train.py").write_text(PROGRAM)
    (root / "config.toml").write_text("")  # the defaults, whatever the user has configured
    _shim(root / "shim", log)
    env = {**os.environ, "PATH": f"{root / 'shim'}:{os.environ.get('PATH', '')}",
           "GUARDED_SBATCH_STATE_DIR": str(root / "state"), "GUARDED_SBATCH_USER_CONFIG": str(root / "config.toml")}
    env.pop("GUARDED_SBATCH_SITE_CONFIG", None)
    # bytecode cached, as an installed package runs (outside the tree): without it each launch compiles every module
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(root / "pycache")
    # one `check` first (submits nothing, records nothing): the modules a launch imports get their bytecode cached
    subprocess.run([sys.executable, "-m", "guarded_sbatch", "check", "--job-name=loop-bench-warm-up", "job.sh"],
                   cwd=project, env=env, capture_output=True, check=False)
    tag = uuid.uuid4().hex[:6]
    rows: list[Row] = []
    submitted: list[str] = []
    try:
        for index in range(1, args.launches + 1):
            row = _launch(index, project, env, log, tag, args.waive, submitted,
                          measured=index <= args.window or index > args.launches - args.window,
                          output=f"out/{index}" if args.keep_live else "out")  # ended runs wrote out/ too
            if row is not None:
                rows.append(row)
            if not args.keep_live:
                subprocess.run(["scancel", *row.ids] if row else ["scancel", *submitted[-2:]], env=env, check=False,
                               capture_output=True)
            _calls(log)
    finally:
        for start in range(0, len(submitted), 200):
            subprocess.run(["scancel", *submitted[start:start + 200]], check=False, capture_output=True)
        shutil.rmtree(root, ignore_errors=True)
    _print(rows, args.window, args.launches, args.keep_live)
    return 0


class Row(NamedTuple):
    index: int
    plain: Cost
    guarded: Cost
    calls: Counter[str]
    ids: list[str]


def _launch(index: int, project: Path, env: dict[str, str], log: Path, tag: str, waive: bool, submitted: list[str],
            *, measured: bool, output: str) -> Row | None:
    """Launch number `index` of the loop; when measured, a plain sbatch of the same script just before it."""
    plain = Cost(0.0, 0.0)
    if measured:
        plain, out = _timed(["sbatch", "--hold", "--parsable", "job.sh"], project, env)
        submitted += _job_ids(out)
        _calls(log)
    argv = [sys.executable, "-m", "guarded_sbatch", "--hold", f"--job-name=loop-bench-{tag}-{index}",
            *(["--guard-waive=config-diff=bench"] if waive else []),
            "job.sh", "--output_dir", output, "--logdir", f"runs/{index}", "--lr", "3e-4", "--steps", "500",
            "--seed", "0"]
    guarded, out = _timed(argv, project, env)
    ids = _job_ids(out)
    submitted += ids
    calls = _calls(log)
    return Row(index, plain, guarded, calls, ids) if measured else None


def _print(rows: list[Row], window: int, launches: int, keep_live: bool) -> None:
    def ms(values: list[float]) -> str:
        return f"{statistics.median(values) * 1000:>6.0f}"

    def line(label: str, chosen: list[Row]) -> str:
        queries = sorted({sum(r.calls[q] for q in QUERIES) for r in chosen})
        kinds: Counter[str] = Counter()
        for r in chosen:
            kinds.update(r.calls)
        per = ", ".join(f"{name} {count / len(chosen):g}" for name, count in sorted(kinds.items()))
        return (f"{label:<22} {ms([r.plain.wall for r in chosen])} {ms([r.guarded.wall for r in chosen])} "
                f"{ms([r.guarded.wall - r.plain.wall for r in chosen])}    "
                f"{ms([r.plain.cpu for r in chosen])} {ms([r.guarded.cpu for r in chosen])} "
                f"{ms([r.guarded.cpu - r.plain.cpu for r in chosen])}   {'/'.join(map(str, queries)):>7}   {per}")

    history = "live (held)" if keep_live else "ended (cancelled after each launch)"
    print(f"guarded-sbatch launch loop on the dev Slurm: {launches} launches from one folder; earlier runs {history}")
    print(f"load average now: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    print(f"{'launch':<22} {'wall ms: plain guarded added':>28}    {'CPU ms: plain guarded added':>27}   queries   "
          "calls per launch")
    print(line("1st", rows[:1]))
    print(line(f"{launches}th", rows[-1:]))
    print(line(f"1st..{window}th, median", rows[:window]))
    print(line(f"{launches - window + 1}th..{launches}th, median", rows[-window:]))
    print("queries = squeue + sacct + scontrol invocations of the launch (sbatch: --version, the job, its sidecar)")


if __name__ == "__main__":
    raise SystemExit(main())
