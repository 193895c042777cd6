"""The examples' fp16/bf16 variants on a GPU machine, guarded on the local backend, in one prepared run of at most
five minutes (the suite never needs a GPU; this is the check a session runs when it is lent one).

    PYTHONPATH=wrapper python3 bench/gpu_check.py [--out DIR] [--pairs N]

Cases, each a real trainer from examples/ launched the everyday way (`guarded-sbatch train.sh ARGS`):
  hf-fp16-nan        HF Trainer fp16, loss NaN from step 40 (logs `loss 0.0` beside `grad_norm nan`): STOP
  hf-fp16-healthy    HF Trainer fp16: left alone, COMPLETED
  pl-bf16-nan        Lightning bf16-mixed, default logger, loss NaN from step 4: STOP
  pl-bf16-healthy    the same, healthy, launched from the same folder within a second of the NaN one: COMPLETED,
                     read through its own TensorBoard file
and the guard's cost: HF fp16 samples/s plain (`python train.py`) and guarded (the local backend's job), in
alternating order, printed side by side with the spread. A table is printed last; the sidecars' outputs and the
status go to DIR (default $OUT or bench/out/gpu).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ENDED = {"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED"}


def run(argv: list[str], cwd: Path, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)


def guarded() -> list[str]:
    return [sys.executable, "-m", "guarded_sbatch"]


def launch(project: Path, script: str, args: list[str], env: dict[str, str], name: str | None = None) -> str:
    # the precision flag is a deliberate change against the example's own config (its reference), and two runs of
    # one example share its output folder (each trainer makes its own version_N / runs/<date>_<host> in it, and the
    # sidecars tell them apart by their writers): both waived, with the reason
    options = ["--job-name", name] if name else []
    options += ["--guard-waive", "config-diff=the example's precision variant on a GPU",
                "--guard-waive", "own-folder=two runs of one example side by side, told apart by their writers"]
    done = run([*guarded(), "--parsable", *options, script, *args], project, env)
    if done.returncode != 0:
        raise SystemExit(f"launch in {project} failed ({done.returncode}): {done.stderr[-2000:]}")
    return done.stdout.strip().splitlines()[-1]


def status(env: dict[str, str], cwd: Path) -> dict[str, dict[str, object]]:
    done = run([*guarded(), "status", "--json"], cwd, env, timeout=60)
    rows = json.loads(done.stdout or "{}").get("runs", [])
    return {str(row.get("job_id")): row for row in rows}


def wait_ended(jobs: list[str], env: dict[str, str], cwd: Path, limit_s: float) -> dict[str, dict[str, object]]:
    deadline = time.monotonic() + limit_s
    rows: dict[str, dict[str, object]] = {}
    while time.monotonic() < deadline:
        rows = status(env, cwd)
        if all(str(rows.get(job, {}).get("state", "")).split()[0:1] and
               str(rows[job].get("state", "")).split()[0] in ENDED for job in jobs):
            break
        time.sleep(3)
    return rows


def project_copy(work: Path, example: str, name: str) -> Path:
    target = work / name
    shutil.copytree(REPO / "examples" / example, target,
                    ignore=shutil.ignore_patterns("outputs", "logs", "runs", "wandb", "lightning_logs", "__pycache__"))
    if importlib.util.find_spec("wandb") is None:  # a GPU image without wandb: the HF example reports to TensorBoard
        for config in (target / "configs").glob("*.yaml"):
            text = config.read_text(encoding="utf-8")
            config.write_text(text.replace("report_to: [tensorboard, wandb]", "report_to: [tensorboard]"),
                              encoding="utf-8")
    return target


def samples_per_second(text: str) -> float | None:
    found = re.findall(r"'train_samples_per_second': '?([0-9.]+)", text)  # transformers 5 quotes its values
    return float(found[-1]) if found else None


def throughput(work: Path, env: dict[str, str], pairs: int, steps: int, precision: str) -> list[tuple[str, float | None]]:
    """HF fp16 samples/s, plain and guarded in turn (plain first in odd pairs, guarded first in even ones)."""
    project = project_copy(work, "hf_trainer", "throughput")
    args = ["--precision", precision, "--max-steps", str(steps)]
    # like for like: the plain run gets what train.sh exports (W&B offline, its project), and the guarded one is
    # waited for by its output file, not by a status call every few seconds beside it
    plain_env = {**env, "WANDB_MODE": "offline", "WANDB_PROJECT": "synthetic-counting-gpt2"}
    results: list[tuple[str, float | None]] = []
    for pair in range(pairs):
        order = ("plain", "guarded") if pair % 2 == 0 else ("guarded", "plain")
        for kind in order:
            if kind == "plain":
                done = run([sys.executable, "train.py", "--config", "configs/tiny-gpt2.yaml", *args], project,
                           plain_env, timeout=180)
                results.append(("plain", samples_per_second(done.stdout + done.stderr)))
            else:
                job = launch(project, "train.sh", args, plain_env, f"gpu-check-throughput-{pair}-{os.getpid()}")
                out = project / f"slurm-{job}.out"
                deadline = time.monotonic() + 180
                while time.monotonic() < deadline and not (out.exists() and samples_per_second(out.read_text(
                        errors="replace"))):
                    time.sleep(2)
                wait_ended([job], env, project, 60)  # its sidecar gone before the next run starts
                results.append(("guarded", samples_per_second(out.read_text(errors="replace")) if out.exists() else None))
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or REPO / "bench" / "out" / "gpu"))
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--hf-precision", default="fp16", help="fp32 for a dry run on a CPU (fp16 needs a GPU)")
    options = parser.parse_args()
    options.out.mkdir(parents=True, exist_ok=True)
    work = Path("/tmp/guarded-gpu-check")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    env = {**os.environ, "GUARDED_SBATCH_BACKEND": "local", "GUARDED_SBATCH_STATE_DIR": str(work / "state"),
           "PYTHONPATH": str(REPO / "wrapper"), "PYTHONUNBUFFERED": "1", "WANDB_MODE": "offline",
           "GUARDED_SBATCH_USER_CONFIG": str(work / "config.toml")}
    (work / "config.toml").write_text("", encoding="utf-8")  # the defaults: the cadence a user gets
    # the job scripts call `python`: this interpreter's environment (the one that holds torch) first on PATH, as an
    # activated venv is (a link to its python elsewhere would lose the venv: the pre-flight's interpreter check says so)
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    if not (Path(sys.executable).parent / "python").exists():
        raise SystemExit(f"no `python` beside {sys.executable}: activate an environment that has one")
    try:
        import torch
        gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    except ImportError:
        gpu = "no torch"
    print(f"gpu: {gpu}", flush=True)
    started = time.monotonic()
    hf = project_copy(work, "hf_trainer", "hf")
    lightning = project_copy(work, "lightning_tiny", "lightning")
    slow = ["--step-seconds", "0.05"]
    cases = {
        "hf-fp16-nan": (hf, "train.sh", ["--precision", options.hf_precision, "--nan-at", "40", "--max-steps", "3000", *slow]),
        "pl-bf16-nan": (lightning, "train-tb.sh", ["--precision", "bf16", "--nan-at", "4", "--max-steps", "2000",
                                                   "--step-seconds", "0.03"]),
        "pl-bf16-healthy": (lightning, "train-tb.sh", ["--precision", "bf16", "--max-steps", "1500",
                                                       "--step-seconds", "0.03"]),
        "hf-fp16-healthy": (hf, "train.sh", ["--precision", options.hf_precision, "--max-steps", "600", *slow]),
    }
    expected = {"hf-fp16-nan": "STOP", "pl-bf16-nan": "STOP", "pl-bf16-healthy": "CONTINUE", "hf-fp16-healthy": "CONTINUE"}
    jobs = {name: launch(folder, script, args, env, f"gpu-check-{name}-{os.getpid()}")
            for name, (folder, script, args) in cases.items()}
    launched = time.monotonic()
    rows = wait_ended(list(jobs.values()), env, work, 200)
    lines = [f"{'case':17} {'job':>5} {'state':12} {'decision':9} {'expected':9} reason"]
    ok = True
    for name, job in jobs.items():
        row = rows.get(job, {})
        decision = str(row.get("decision") or row.get("verdict") or "")
        state = str(row.get("state", "?"))
        good = (decision.startswith("STOP") and "CANCEL" in state) if expected[name] == "STOP" else \
            (state.startswith("COMPLETED") and not decision.startswith("STOP"))
        ok &= good
        reason = " ".join(str(row.get("reason", "")).split())[:70]
        lines.append(f"{name:17} {job:>5} {state[:12]:12} {decision[:9]:9} {expected[name]:9} {reason}"
                     f"{'' if good else '   <-- NOT AS EXPECTED'}")
    lines.append(f"(status read {time.monotonic() - launched:.0f} s after the four launches)")
    (options.out / "status.json").write_text(json.dumps(rows, indent=1, default=str), encoding="utf-8")
    with tarfile.open(options.out / "sidecars.tar.gz", "w:gz") as bundle:
        for path in sorted((work / "state").rglob("*")):
            if path.is_file() and (path.suffix in {".out", ".json", ".md"} or path.name.startswith("report")):
                bundle.add(path, arcname=str(path.relative_to(work)))
        for folder in (hf, lightning):
            for path in folder.glob("slurm-*.out"):
                bundle.add(path, arcname=str(path.relative_to(work)))
    speeds = throughput(work, env, options.pairs, options.steps, options.hf_precision)
    plain = [v for k, v in speeds if k == "plain" and v]
    guard = [v for k, v in speeds if k == "guarded" and v]
    lines.append("throughput, HF fp16 samples/s in run order: " + ", ".join(f"{k} {v}" for k, v in speeds))
    if plain and guard:
        spread = statistics.pstdev(plain) if len(plain) > 1 else 0.0
        lines.append(f"plain mean {statistics.mean(plain):.0f} (sd {spread:.0f}), guarded mean {statistics.mean(guard):.0f} "
                     f"(sd {statistics.pstdev(guard) if len(guard) > 1 else 0:.0f}): guarded/plain "
                     f"{statistics.mean(guard) / statistics.mean(plain):.3f}")
    lines.append(f"total {time.monotonic() - started:.0f} s; all cases as expected: {ok}")
    table = "\n".join(lines)
    (options.out / "gpu_check.txt").write_text(table + "\n", encoding="utf-8")
    print(table, flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
