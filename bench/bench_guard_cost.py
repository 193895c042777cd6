"""What the guard costs a real training run: the HF Trainer example (examples/hf_trainer, tiny GPT-2; on a GPU when
there is one) trained for a fixed number of steps, plain and guarded, in alternating order (each round runs every
variant once; by default in the order given, then reversed, so that in every pair each variant runs first every other
round; --order rotate shifts it by one each round), its samples/s (the Trainer's own `train_samples_per_second`)
side by side with the machine's load, then per variant: mean, spread and the guarded/plain ratio (of the means,
and the mean of each round's own ratio, which cancels the load's drift between rounds). Asserts nothing.

    .venv/bin/python bench/bench_guard_cost.py [--rounds 3] [--steps 300] [--threads 1] [--variants plain,sh,run]
        [--ablate] [--slurm] [--poll 5] [--precision fp16] [--code-before DIR] [--work DIR] [--order alternate]

Issue 36's comparison, local backend and dev Slurm, six pairs each (about 5 minutes on 2 busy cores; the figures
and what they say: bench/results/cpu-2026-12-04.md):
    .venv/bin/python bench/bench_guard_cost.py --variants plain,sh,slurm-plain,slurm-sh --rounds 6 --steps 300

Variants (--variants, comma-separated; the first is the anchor the ratios divide by):
  plain          python train.py --config configs/tiny-gpt2.yaml --max-steps N (the user's environment, which also
                 carries what train.sh exports: WANDB_MODE=offline, WANDB_PROJECT), output to a file
  sh             guarded-sbatch train.sh --max-steps N (local backend, sidecar reading every --poll seconds)
  run            guarded-sbatch run -- python train.py ... (local backend)
  sh-nosidecar   guarded, the sidecar job replaced by one that exits at once: the job, its supervisor and env alone
  sh-poll60      guarded, the sidecar reading every 60 s
  plain-jobenv   plain, given exactly the environment the guarded job's trainer had (read from its /proc environ
                 during the first guarded run; the difference is printed)
  plain-setsid   plain in a session of its own, as the local backend starts a job (its own CFS autogroup where
                 the kernel has sched_autogroup_enabled: its CPU share no longer shared with the shell's)
  plain-nowandb  plain with WANDB_MODE=disabled (not the guard's cost: how much W&B offline logging weighs)
  slurm-plain    sbatch train.sh on the dev Slurm;  slurm-sh: guarded-sbatch train.sh on the dev Slurm;
                 slurm-nosidecar: slurm-sh with the sidecar job replaced by one that exits at once
  sh-before      sh with the code of --code-before DIR (an earlier commit's wrapper/): the fix's anchor
--ablate adds sh-nosidecar, sh-poll60, plain-jobenv, plain-nowandb; --slurm adds slurm-plain, slurm-sh.
The bench waits for a run's sidecar to end before the next run starts, and reads job states from the local
backend's job files (no CLI polling beside a run). Each guarded run's sidecar and supervisors' CPU seconds are
printed too.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from guard_cost_report import Outcome, env_diff, side_by_side, summary

REPO = Path(__file__).resolve().parents[1]
CONFIG = "configs/tiny-gpt2.yaml"
SPEED = re.compile(r"'train_samples_per_second': '?([0-9.]+)")
RUNTIME = re.compile(r"'train_runtime': '?([0-9.]+)")
ABLATIONS = ["sh-nosidecar", "sh-poll60", "plain-jobenv", "plain-setsid", "plain-nowandb"]
SLURM = ["slurm-plain", "slurm-sh", "slurm-nosidecar"]
ENDED = {"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL",
         "DEADLINE"}
WAIVE = ["--guard-waive", "config-diff=bench: the same config run again and again",
         "--guard-waive", "own-folder=bench: one run at a time in the same folder"]
TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Bench:
    work: Path
    project: Path
    env: dict[str, str]
    steps: int
    precision: str
    code_before: str
    poll: float
    timeout: float
    job_env: dict[str, str] | None = None  # the guarded trainer's environment, read once


def script_args(bench: Bench) -> list[str]:
    """What every variant hands train.py beyond its config (train.sh passes its own arguments on)."""
    return ["--max-steps", str(bench.steps), *(["--precision", bench.precision] if bench.precision else [])]


def train_args(bench: Bench) -> list[str]:
    return ["--config", CONFIG, *script_args(bench)]


def figures(path: Path, note: str = "") -> Outcome:
    """The Trainer's own samples/s and train_runtime from a run's output."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return Outcome(None, note=note or "no output")
    speed, runtime = SPEED.findall(text), RUNTIME.findall(text)
    return Outcome(float(speed[-1]) if speed else None, float(runtime[-1]) if runtime else None,
                   note=note or ("" if speed else "no train_samples_per_second"))


def fresh_outputs(bench: Bench) -> None:
    """Every run starts from the same folder state (the run-name check refuses an existing output folder)."""
    shutil.rmtree(bench.project / "outputs", ignore_errors=True)


def plain(bench: Bench, env: dict[str, str] | None = None, *, session: bool = False) -> Outcome:
    fresh_outputs(bench)
    log = bench.work / "plain.out"
    deadline = time.monotonic() + bench.timeout
    used = None
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(Path(sys.executable).parent / "python"), "train.py", *train_args(bench)],
                                cwd=bench.project, env=env or bench.env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=session)
        while proc.poll() is None and time.monotonic() < deadline:
            used = cpu_seconds(proc.pid) or used  # sampled as the guarded trainer's is
            time.sleep(0.5)
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    outcome = figures(log)
    outcome.trainer_cpu = used
    return outcome


def guarded_cli() -> list[str]:
    return [sys.executable, "-m", "guarded_sbatch"]


def config_env(bench: Bench, name: str, text: str) -> dict[str, str]:
    path = bench.work / f"config-{name}.toml"
    path.write_text(text, encoding="utf-8")
    return {**bench.env, "GUARDED_SBATCH_USER_CONFIG": str(path)}


def submit(bench: Bench, argv: list[str], env: dict[str, str]) -> tuple[str, str]:
    """Launch; (training job id, sidecar job id) from what the launch prints."""
    fresh_outputs(bench)
    done = subprocess.run(argv, cwd=bench.project, env=env, capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        raise SystemExit(f"launch failed ({done.returncode}): {' '.join(argv[3:])}\n{done.stderr[-1500:]}")
    job = re.findall(r"^(\d+)", done.stdout, re.M)
    side = re.findall(r"sidecar job (\d+) watches job|its watcher is local job (\d+)", done.stderr)
    if not job:
        raise SystemExit(f"no job id in the launch's output: {done.stdout[-500:]}")
    return job[-1], "".join(side[-1]) if side else ""


def local_status(bench: Bench, job: str) -> dict[str, object]:
    try:
        return json.loads((bench.work / "state" / "local-jobs" / job / "job.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def cpu_seconds(pid: object) -> float | None:
    try:
        fields = Path(f"/proc/{int(str(pid))}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, ValueError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / TICKS


def guard_pids(bench: Bench, job: str, sidecar: str) -> list[tuple[str, object]]:
    """(role, pid): the supervisor of the job and of its sidecar, and the sidecar itself."""
    pids: list[tuple[str, object]] = []
    for one in (job, sidecar):
        supervisor = bench.work / "state" / "local-jobs" / one / "supervisor.json"
        try:
            pids.append(("supervisor", json.loads(supervisor.read_text(encoding="utf-8"))["pid"]))
        except (OSError, ValueError, KeyError):
            pass
    if sidecar:
        pids.append(("sidecar", local_status(bench, sidecar).get("pid")))
    return pids


def trainer_pid(bench: Bench, job: str) -> int | None:
    """The job's `python train.py` process (the batch script's child, or itself after an exec)."""
    pgid = local_status(bench, job).get("pgid")
    if not pgid:
        return None
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and os.getpgid(int(entry.name)) == int(str(pgid)) and \
                    b"train.py" in (entry / "cmdline").read_bytes():
                return int(entry.name)
        except OSError:
            continue
    return None


def catch_job_env(bench: Bench, pid: int) -> None:
    """The trainer's own environment, read from /proc while it runs (the first guarded run only)."""
    if bench.job_env is not None:
        return
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return
    bench.job_env = dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def finished_training(path: Path) -> bool:
    """The Trainer printed its closing metrics (the last few KB of the job's output)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, handle.seek(0, os.SEEK_END) - 4096))
            return b"train_runtime" in handle.read()
    except OSError:
        return False


def in_window(timeline: list[tuple[float, float]], end: float | None, runtime: float | None) -> float | None:
    """The guard's CPU seconds between the training loop's start (its end less train_runtime) and its end."""
    if end is None or not runtime or not timeline:
        return None

    def at(moment: float) -> float:
        return max((cpu for t, cpu in timeline if t <= moment), default=0.0)

    return at(end) - at(end - runtime)


def sample(bench: Bench, job: str, sidecar: str, used: dict[tuple[str, str], float]) -> None:
    """Every CPU counter of one 0.5 s tick: the trainer (its pid found once) and the guard's processes."""
    trainer = next((int(pid) for role, pid in used if role == "trainer"), None) or trainer_pid(bench, job)
    if trainer:
        catch_job_env(bench, trainer)
        used[("trainer", str(trainer))] = cpu_seconds(trainer) or used.get(("trainer", str(trainer)), 0.0)
    for role, pid in guard_pids(bench, job, sidecar):
        seconds = cpu_seconds(pid)
        if seconds is not None:
            used[(role, str(pid))] = seconds


def wait_local(bench: Bench, job: str, sidecar: str) -> Outcome:
    """Until the job and its sidecar have ended; CPU counters read every 0.5 s, the guard's kept as a timeline."""
    deadline = time.monotonic() + bench.timeout
    used: dict[tuple[str, str], float] = {}
    timeline: list[tuple[float, float]] = []
    output, ended_at = bench.project / f"slurm-{job}.out", None
    while time.monotonic() < deadline:
        sample(bench, job, sidecar, used)
        now = time.monotonic()
        timeline.append((now, sum(v for (role, _), v in used.items() if role != "trainer")))
        if ended_at is None and finished_training(output):
            ended_at = now
        states = [str(local_status(bench, one).get("state", "")) for one in (job, sidecar) if one]
        if all(state in ENDED for state in states):
            break
        time.sleep(0.5)
    state = str(local_status(bench, job).get("state", "?"))
    outcome = figures(output, "" if state == "COMPLETED" else state)
    outcome.sidecar_cpu = sum(v for (role, _), v in used.items() if role == "sidecar")
    outcome.supervisor_cpu = sum(v for (role, _), v in used.items() if role == "supervisor")
    outcome.trainer_cpu = sum(v for (role, _), v in used.items() if role == "trainer") or None
    outcome.window_cpu = in_window(timeline, ended_at, outcome.runtime)
    return outcome


def guarded(bench: Bench, name: str, *, run: bool = False, top: str = "", sidecar: str = "",
            env: dict[str, str] | None = None) -> Outcome:
    """A guarded launch on the local backend with its own user config (`top`: top-level keys, `sidecar`: more of
    [sidecar]); the sidecar reads every --poll seconds unless `sidecar` says otherwise."""
    poll = "" if "fast_interval_seconds" in sidecar else f"fast_interval_seconds = {bench.poll}\n"
    env = {**config_env(bench, name, f"{top}[sidecar]\n{poll}{sidecar}"), **(env or {})}
    if run:
        argv = [*guarded_cli(), "run", *WAIVE, "--job-name", "synthetic-counting-gpt2-tiny-lr1e-3", "--",
                "python", "train.py", *train_args(bench)]
    else:
        argv = [*guarded_cli(), "--parsable", *WAIVE, "train.sh", *script_args(bench)]
    job, side = submit(bench, argv, env)
    return wait_local(bench, job, side)


def sidecar_off(bench: Bench) -> str:
    """A user config's lines that replace the sidecar job by one that exits at once."""
    templates = bench.work / "templates"
    templates.mkdir(exist_ok=True)
    (templates / "sidecar-off.sbatch").write_text("#!/bin/bash\n# bench: no sidecar\nexit 0\n", encoding="utf-8")
    return f'template_dirs = ["{templates}"]\n[sidecar]\ntemplate = "sidecar-off.sbatch"\n'


def no_sidecar(bench: Bench) -> Outcome:
    top, _, sidecar = sidecar_off(bench).partition("[sidecar]\n")
    return guarded(bench, "nosidecar", top=top, sidecar=sidecar)


def slurm_live(jobs: list[str]) -> bool:
    done = subprocess.run(["squeue", "-h", "-j", ",".join(jobs), "-o", "%T"], capture_output=True, text=True,
                          timeout=30, check=False)
    if done.returncode != 0:  # squeue refuses ids that left slurmctld's memory: they have ended
        return False
    return any(state.strip() not in ENDED for state in done.stdout.split())


def on_slurm(bench: Bench, guard: bool, *, sidecar: bool = True) -> Outcome:
    """plain `sbatch train.sh` or `guarded-sbatch train.sh` on the dev Slurm; squeue asked every 2 s for both."""
    env = {k: v for k, v in bench.env.items() if k != "GUARDED_SBATCH_BACKEND"}
    if guard:
        config = f"[sidecar]\nfast_interval_seconds = {bench.poll}\n" if sidecar else sidecar_off(bench)
        env = {k: v for k, v in config_env(bench, "slurm" if sidecar else "slurm-off", config).items()
               if k != "GUARDED_SBATCH_BACKEND"}
        job, side = submit(bench, [*guarded_cli(), "--guard-backend", "slurm", "--parsable", *WAIVE, "train.sh",
                                   *script_args(bench)], env)
    else:
        job, side = submit(bench, ["sbatch", "--parsable", "train.sh", *script_args(bench)], env)
    jobs = [one.split(";")[0] for one in (job, side) if one]
    deadline = time.monotonic() + bench.timeout
    while time.monotonic() < deadline and slurm_live(jobs):
        time.sleep(2)
    outcome = figures(bench.project / f"slurm-{jobs[0]}.out")
    outcome.trainer_cpu = batch_cpu(jobs[0])
    return outcome


def batch_cpu(job: str) -> float | None:
    """The batch step's CPU seconds (the script and the trainer it ran: sacct's TotalCPU, jobacct_gather/linux), as
    the local variants' trainer CPU, the measure the machine's load does not move; slurmdbd may take a few s."""
    for _ in range(10):
        done = subprocess.run(["sacct", "-n", "-P", "-j", f"{job}.batch", "-o", "TotalCPU"], capture_output=True,
                              text=True, timeout=30, check=False)
        text = done.stdout.strip()
        if done.returncode == 0 and text:
            days, _, clock = text.rpartition("-")
            seconds = sum(float(part) * 60 ** i for i, part in enumerate(reversed(clock.split(":"))))
            return seconds + 86400 * int(days or 0)
        time.sleep(1)
    return None


def plain_jobenv(bench: Bench) -> Outcome:
    return plain(bench, bench.job_env) if bench.job_env else Outcome(None, note="no job env caught")


VARIANTS: dict[str, Callable[[Bench], Outcome]] = {
    "plain": plain,
    "sh": lambda b: guarded(b, "sh"),
    "run": lambda b: guarded(b, "run", run=True),
    "sh-before": lambda b: guarded(b, "before", env={"PYTHONPATH": b.code_before}),
    "sh-nosidecar": no_sidecar,
    "sh-poll60": lambda b: guarded(b, "poll60", sidecar="fast_interval_seconds = 60\n"),
    "plain-jobenv": plain_jobenv,
    "plain-nowandb": lambda b: plain(b, {**b.env, "WANDB_MODE": "disabled"}),
    "plain-setsid": lambda b: plain(b, session=True),
    "slurm-plain": lambda b: on_slurm(b, False),
    "slurm-sh": lambda b: on_slurm(b, True),
    "slurm-nosidecar": lambda b: on_slurm(b, True, sidecar=False),
}


def one_round(bench: Bench, order: list[str], index: int) -> dict[str, Outcome]:
    row: dict[str, Outcome] = {}
    loads = []
    for name in order:
        loads.append(os.getloadavg()[0])
        row[name] = VARIANTS[name](bench)
    cells = "  ".join(f"{n}={o.speed if o.speed else 'n/a'}{' ' + o.note if o.note else ''}" for n, o in row.items())
    print(f"round {index + 1}  load {min(loads):.1f}-{max(loads):.1f}  order {','.join(order)}: {cells}", flush=True)
    return row


def round_order(names: list[str], index: int, how: str) -> list[str]:
    """alternate: the variants as given, then reversed (in every pair each goes first every other round);
    rotate: shifted by one each round."""
    if how == "alternate":
        return names if index % 2 == 0 else names[::-1]
    return names[index % len(names):] + names[:index % len(names)]


def setup(options: argparse.Namespace) -> Bench:
    work = options.work or Path(f"/tmp/bench-guard-cost-{os.getpid()}")
    shutil.rmtree(work, ignore_errors=True)
    project = work / "project"
    shutil.copytree(REPO / "examples" / "hf_trainer", project, ignore=shutil.ignore_patterns(
        "outputs", "wandb", "runs", "slurm-*.out", "__pycache__"))
    interpreter = Path(sys.executable).parent
    if not (interpreter / "python").exists():
        raise SystemExit(f"no `python` beside {sys.executable}: run the bench with an environment's python")
    env = {**os.environ, "PATH": f"{interpreter}:{os.environ.get('PATH', '')}", "GUARDED_SBATCH_BACKEND": "local",
           "GUARDED_SBATCH_STATE_DIR": str(work / "state"), "WANDB_MODE": "offline",
           "WANDB_PROJECT": "synthetic-counting-gpt2", "PYTHONPATH": str(REPO / "wrapper")}
    for name in ("WANDB_RUN_ID", "WANDB_RESUME", "PYTHONUNBUFFERED", "MLFLOW_RUN_CONTEXT"):
        env.pop(name, None)  # a user's shell has none of them; the guard's own additions show in the diff
    if options.threads:
        env["OMP_NUM_THREADS"] = str(options.threads)
    return Bench(work, project, env, options.steps, options.precision, str(options.code_before or ""), options.poll,
                 options.timeout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--threads", type=int, default=1,
                        help="OMP_NUM_THREADS for every variant alike (0: torch's default, one per core; on a busy "
                             "2-core machine its spinning threads make a run 5-40x slower at random)")
    parser.add_argument("--precision", default="", help="fp16/bf16 on a GPU (train.py's flag; default: the config's)")
    parser.add_argument("--poll", type=float, default=5.0, help="the sidecar's read interval (the report's 5 s)")
    parser.add_argument("--variants", default="plain,sh,run")
    parser.add_argument("--order", choices=("alternate", "rotate"), default="alternate",
                        help="alternate: as given, then reversed, round after round; rotate: shifted by one a round")
    parser.add_argument("--ablate", action="store_true", help="add " + ",".join(ABLATIONS))
    parser.add_argument("--slurm", action="store_true", help="add " + ",".join(SLURM))
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds one run may take")
    parser.add_argument("--work", type=Path)
    parser.add_argument("--code-before", type=Path, help="a `wrapper` folder of an earlier commit: adds sh-before, "
                        "the same guarded launch with that code (e.g. git archive COMMIT wrapper | tar -x -C DIR)")
    options = parser.parse_args()
    names = [n for n in options.variants.split(",") if n] + (ABLATIONS if options.ablate else []) + \
        (SLURM if options.slurm else []) + (["sh-before"] if options.code_before else [])
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        parser.error(f"unknown variant(s) {', '.join(unknown)}; known: {', '.join(VARIANTS)}")
    bench = setup(options)
    started = time.monotonic()
    print(f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f} (a shared machine: other work runs beside the "
          f"bench); {options.steps} steps per run, sidecar reads every {options.poll:g} s", flush=True)
    # an untimed warm-up: the same caches for every variant, and the guarded trainer's environment caught
    warm = Bench(**{**bench.__dict__, "steps": 2})
    guarded(warm, "warmup", run=True)
    bench.job_env = warm.job_env
    if bench.job_env:
        print("the guarded trainer's environment against the plain one:", flush=True)
        print("\n".join(env_diff(bench.env, bench.job_env)) or "  (the same)", flush=True)
    rows = [one_round(bench, round_order(names, r, options.order), r) for r in range(options.rounds)]
    print(f"samples/s of {options.steps} steps, {options.rounds} rounds; ratio = mean / mean of its anchor ({names[0]}; "
          f"slurm-plain for the dev Slurm variants), "
          f"paired = each round's own ratio; CPU s = the trainer process's own CPU seconds per run (its work, "
          f"whatever the load); sidecar/superv = their CPU s per run (start-up included), guard % = both over "
          f"the run's train_runtime, in loop = the guard's CPU while the training loop ran, over it", flush=True)
    print("\n".join(summary(names, rows) + side_by_side(names, rows)), flush=True)
    print(f"total {time.monotonic() - started:.0f} s; work folder {bench.work}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
