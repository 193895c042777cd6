"""bench_guard_cost.py's figures: per variant mean, spread and ratio to its anchor (the local `plain` run for the
local variants, `slurm-plain` for the dev Slurm ones), and each guarded variant beside its anchor round by round."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from math import nan

GUARDED = ("sh", "run", "slurm-sh")  # the launches a user makes, each printed beside its plain anchor


@dataclass
class Outcome:
    speed: float | None
    runtime: float | None = None  # the Trainer's train_runtime (seconds)
    sidecar_cpu: float | None = None  # CPU seconds of the sidecar, and of the two supervisors, over the run
    supervisor_cpu: float | None = None
    trainer_cpu: float | None = None  # the trainer process's own CPU seconds, last seen (sampled every 0.5 s)
    window_cpu: float | None = None  # the guard's CPU seconds while the training loop ran (train_runtime)
    note: str = ""


def anchor_of(name: str, names: list[str]) -> str:
    """A dev Slurm variant is compared with plain sbatch on the same cluster; every other with the first variant."""
    if name.startswith("slurm-") and name != "slurm-plain" and "slurm-plain" in names:
        return "slurm-plain"
    return names[0]
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
    if not used:
        return f"{'n/a':>11}"
    return f"{statistics.mean(used):5.1f} ± {statistics.stdev(used) if len(used) > 1 else 0.0:3.1f}"


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
    lines = [f"{'variant':14} {'n':>2} {'mean':>8} {'sd':>7} {'min':>8} {'max':>8}  {'ratio':>6}  "
             f"{'paired (sd)':>15}  {'CPU s (sd)':>11}  {'sidecar':>6} {'superv':>6} {'guard %':>7} {'in loop':>8}"]
    for name in names:
        anchor = anchor_of(name, names)
        base, speeds, paired = speeds_of(rows, anchor), speeds_of(rows, name), paired_ratios(rows, name, anchor)
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


def side_by_side(names: list[str], rows: list[dict[str, Outcome]]) -> list[str]:
    """Each guarded variant beside its anchor, round by round (which ran first): samples/s, and the trainer's CPU
    seconds (its work, which the machine's load hardly moves), then each measure's paired ratios and their spread."""
    lines: list[str] = []
    for name in (n for n in GUARDED if n in names and anchor_of(n, names) != n):
        anchor = anchor_of(name, names)
        lines += ["", f"{anchor} against {name}, round by round (samples/s; the trainer's CPU s):",
                  f"{'round':>5}  {anchor:>12}  {name:>12}  {'ratio':>6}  {'CPU s':>6}  {'CPU s':>6}  {'ratio':>6}  first"]
        for index, row in enumerate(rows):
            a, b, ca, cb = row[anchor].speed, row[name].speed, row[anchor].trainer_cpu, row[name].trainer_cpu
            first = next(n for n in row if n in (anchor, name))
            lines.append(f"{index + 1:>5}  {a or nan:12.1f}  {b or nan:12.1f}  {b / a if a and b else nan:6.3f}  "
                         f"{ca or nan:6.1f}  {cb or nan:6.1f}  {cb / ca if ca and cb else nan:6.3f}  {first}")
        for what, paired in (("samples/s", paired_ratios(rows, name, anchor)),
                             ("CPU s", [b / a for r in rows if (a := r[anchor].trainer_cpu) and (b := r[name].trainer_cpu)])):
            if paired:
                sd = statistics.stdev(paired) if len(paired) > 1 else 0.0
                lines.append(f"{name}/{anchor} {what}: mean of the rounds' ratios {statistics.mean(paired):.3f} "
                             f"(sd {sd:.3f}, {min(paired):.3f}-{max(paired):.3f}, {len(paired)} pairs)")
    return lines
