"""What the login path costs a user, beside the interpreter's own start-up measured in the same run (the anchor):
`guarded-sbatch --version`, the pre-flight alone (`check` on the example project, local backend), `status` with
runs to list (piped; and on a terminal, where rich draws the table), and the import of rich itself, which only
`status` on a terminal pays. Also asserts that a launch never imports rich.

    PYTHONPATH=wrapper python bench/bench_login.py [--repeat 7]
"""

from __future__ import annotations

import argparse
import os
import pty
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def timed(argv: list[str], *, cwd: Path, env: dict[str, str], tty: bool = False) -> float:
    started = time.perf_counter()
    if tty:
        master, slave = pty.openpty()
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=slave, stderr=subprocess.DEVNULL,
                                stdin=subprocess.DEVNULL)
        os.close(slave)
        while True:
            try:
                if not os.read(master, 65536):
                    break
            except OSError:
                break
        proc.wait(timeout=120)
        os.close(master)
    else:
        subprocess.run(argv, cwd=cwd, env=env, capture_output=True, timeout=120, check=False)
    return time.perf_counter() - started


def median_of(repeat: int, argv: list[str], **kwargs: object) -> tuple[float, float]:
    """(median, fastest): the fastest is the least disturbed by other work on a shared machine."""
    times = [timed(argv, **kwargs) for _ in range(repeat)]  # type: ignore[arg-type]
    return statistics.median(times), min(times)


def _wait_for_local_jobs(folder: Path, timeout_s: float = 120.0) -> None:
    import json

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        states = []
        for job in folder.glob("*/job.json"):
            try:
                states.append(json.loads(job.read_text()).get("state"))
            except (OSError, ValueError):
                states.append(None)
        if states and all(s in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT") for s in states):
            return
        time.sleep(0.5)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--wrapper", type=Path, default=REPO / "wrapper", help="the package tree to measure")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-login-") as tmp:
        root = Path(tmp) / "project"
        shutil.copytree(REPO / "examples" / "tiny_mlp", root,
                        ignore=shutil.ignore_patterns("events.out.tfevents.*", "__pycache__"))
        env = {**os.environ, "GUARDED_SBATCH_STATE_DIR": str(Path(tmp) / "state"), "COLUMNS": "100",
               "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",  # the job's python
               "PYTHONPATH": os.pathsep.join(filter(None, [str(args.wrapper), os.environ.get("PYTHONPATH")]))}
        env.pop("GUARDED_SBATCH_USER_CONFIG", None)
        me = [sys.executable, "-m", "guarded_sbatch"]
        # a few ended runs for status to list (real local jobs of the example trainer)
        for index in range(3):
            subprocess.run([*me, "--guard-backend", "local", "--job-name", f"synthetic-tanh-mlp-bench-{index}",
                            "--wait", "--quiet", "train.sh", "--steps", "5", "--step-seconds", "0",
                            "--logdir", f"runs/bench-{index}"], cwd=root, env=env, check=True, timeout=120)
        _wait_for_local_jobs(Path(tmp) / "state" / "local-jobs")  # their sidecars too: nothing else runs meanwhile
        heavy = subprocess.run([sys.executable, "-c", "import sys, guarded_sbatch.cli.main, guarded_sbatch.cli.launch, "
                                "guarded_sbatch.cli.lifecycle; print(sorted(m for m in sys.modules if m.startswith('rich')))"],
                               env=env, capture_output=True, text=True, check=True).stdout.strip()
        assert heavy == "[]", f"the login path imports rich: {heavy}"
        anchor = median_of(args.repeat, [sys.executable, "-c", "pass"], cwd=root, env=env)
        rows = [
            ("anchor: python -c pass (interpreter start-up)", anchor),
            ("guarded-sbatch --version", median_of(args.repeat, [*me, "--version"], cwd=root, env=env)),
            ("guarded-sbatch check train.sh (the pre-flight)", median_of(args.repeat, [*me, "check", "--guard-backend",
                                                                           "local", "train.sh"], cwd=root, env=env)),
            ("guarded-sbatch status, piped (3 runs)", median_of(args.repeat, [*me, "status"], cwd=root, env=env)),
            ("guarded-sbatch status, on a terminal (rich)", median_of(args.repeat, [*me, "status"], cwd=root, env=env,
                                                                      tty=True)),
            ("python -c 'import rich.console, rich.table'", median_of(args.repeat, [
                sys.executable, "-c", "import rich.console, rich.table"], cwd=root, env=env)),
        ]
    print(f"login path, {args.repeat} runs each, seconds: median and fastest, each also over the anchor "
          "(the interpreter's own start-up)")
    for name, (median, fastest) in rows:
        print(f"  {name:<50} median {median:6.3f} ({median - anchor[0]:+.3f})  fastest {fastest:6.3f} "
              f"({fastest - anchor[1]:+.3f})")
    print("rich is not imported by cli.main, cli.launch or cli.lifecycle (checked)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
