"""What the guard costs a real training run: the HF Trainer example (examples/hf_trainer, tiny GPT-2; on a GPU when
there is one) trained for a fixed number of steps, plain and guarded, in rotating order (each round runs every
variant once, the order shifted by one each round), its samples/s (the Trainer's own `train_samples_per_second`)
side by side with the machine's load, then per variant: mean, spread and the guarded/plain ratio (of the means,
and the mean of each round's own ratio, which cancels the load's drift between rounds). Asserts nothing.

    .venv/bin/python bench/bench_guard_cost.py [--rounds 3] [--steps 300] [--threads 1] [--variants plain,sh,run]
        [--ablate] [--slurm] [--poll 5] [--precision fp16] [--code-before DIR] [--work DIR]

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
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

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


@dataclass
class Outcome:
    speed: float | None
    runtime: float | None = None  # the Trainer's train_runtime (seconds)
    sidecar_cpu: float | None = None  # CPU seconds of the sidecar, and of the two supervisors, over the run
    supervisor_cpu: float | None = None
    trainer_cpu: float | None = None  # the trainer process's own CPU seconds, last seen (sampled every 0.5 s)
    window_cpu: float | None = None  # the guard's CPU seconds while the training loop ran (train_runtime)
    note: str = ""


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
    return figures(bench.project / f"slurm-{jobs[0]}.out")


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


def env_diff(plain_env: dict[str, str], job_env: dict[str, str]) -> list[str]:
    """What the guarded trainer's environment adds to, changes in or drops from the plain one."""
    ignore = {"_", "SHLVL", "OLDPWD", "PWD"}
    lines = []
    for name in sorted(set(plain_env) | set(job_env)):
        if name in ignore or plain_env.get(name) == job_env.get(name):
            continue
        if name not in plain_env:
            lines.append(f"  + {name}={job_env[name][:60]}")
        elif name not in job_env:
            lines.append(f"  - {name}")
        else:
            lines.append(f"  ~ {name}={job_env[name][:60]} (plain: {plain_env[name][:40]})")
    return lines


def speeds_of(rows: list[dict[str, Outcome]], name: str) -> list[float]:
    return [o.speed for r in rows if (o := r[name]).speed is not None]


def paired_ratios(rows: list[dict[str, Outcome]], name: str, anchor: str) -> list[float]:
    return [a / b for r in rows if (a := r[name].speed) is not None and (b := r[anchor].speed)]


def trainer_cpu(runs: list[Outcome]) -> str:
    used = [o.trainer_cpu for o in runs if o.trainer_cpu]
    return f"{statistics.mean(used):7.1f}" if used else f"{'n/a':>7}"


def guard_share(runs: list[Outcome]) -> str:
    """The guard's CPU beside the run: sidecar and supervisors' seconds per run, and their sum as a share of one
    core over the Trainer's train_runtime (the most throughput it could take from a trainer using every core)."""
    runs = [o for o in runs if o.sidecar_cpu is not None]
    if not runs:
        return ""
    side = statistics.mean(o.sidecar_cpu or 0.0 for o in runs)
    sup = statistics.mean(o.supervisor_cpu or 0.0 for o in runs)
    shares = [((o.sidecar_cpu or 0.0) + (o.supervisor_cpu or 0.0)) / o.runtime for o in runs if o.runtime]
    share = f"{100 * statistics.mean(shares):.1f}%" if shares else "n/a"
    during = [o.window_cpu / o.runtime for o in runs if o.window_cpu is not None and o.runtime]
    window = f"{100 * statistics.mean(during):.2f}%" if during else "n/a"
    return f"{side:6.2f} {sup:6.2f} {share:>7} {window:>8}"


def summary(names: list[str], rows: list[dict[str, Outcome]]) -> list[str]:
    base = speeds_of(rows, names[0])
    lines = [f"{'variant':14} {'n':>2} {'mean':>8} {'sd':>7} {'min':>8} {'max':>8}  {'ratio':>6}  "
             f"{'paired (sd)':>15}  {'CPU s':>7}  {'sidecar':>6} {'superv':>6} {'guard %':>7} {'in loop':>8}"]
    for name in names:
        speeds, paired = speeds_of(rows, name), paired_ratios(rows, name, names[0])
        if not speeds:
            lines.append(f"{name:14}  0  (no figure)")
            continue
        sd = statistics.stdev(speeds) if len(speeds) > 1 else 0.0
        ratio = statistics.mean(speeds) / statistics.mean(base) if base else float("nan")
        pmean = statistics.mean(paired) if paired else float("nan")
        psd = statistics.stdev(paired) if len(paired) > 1 else 0.0
        lines.append(f"{name:14} {len(speeds):>2} {statistics.mean(speeds):8.1f} {sd:7.1f} {min(speeds):8.1f} "
                     f"{max(speeds):8.1f}  {ratio:6.3f}  {pmean:6.3f} ({psd:.3f})  {trainer_cpu([r[name] for r in rows])}  "
                     f"{guard_share([r[name] for r in rows])}")
    return lines


def one_round(bench: Bench, order: list[str], index: int) -> dict[str, Outcome]:
    row: dict[str, Outcome] = {}
    loads = []
    for name in order:
        loads.append(os.getloadavg()[0])
        row[name] = VARIANTS[name](bench)
    cells = "  ".join(f"{n}={o.speed if o.speed else 'n/a'}{' ' + o.note if o.note else ''}" for n, o in row.items())
    print(f"round {index + 1}  load {min(loads):.1f}-{max(loads):.1f}  order {','.join(order)}: {cells}", flush=True)
    return row


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
    rows = [one_round(bench, names[r % len(names):] + names[:r % len(names)], r) for r in range(options.rounds)]
    print(f"samples/s of {options.steps} steps, {options.rounds} rounds; ratio = mean / mean of {names[0]}, "
          f"paired = each round's own ratio; CPU s = the trainer process's own CPU seconds per run (its work, "
          f"whatever the load); sidecar/superv = their CPU s per run (start-up included), guard % = both over "
          f"the run's train_runtime, in loop = the guard's CPU while the training loop ran, over it", flush=True)
    print("\n".join(summary(names, rows)), flush=True)
    print(f"total {time.monotonic() - started:.0f} s; work folder {bench.work}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
