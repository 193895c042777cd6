"""Benchmark: a 256-task job array watched by ONE watcher job, beside the anchor, the same array with a sidecar job
per task (what guarded-sbatch did before), both measured in this run on the local backend.

    PYTHONPATH=wrapper .venv/bin/python bench/bench_array_watch.py [--tasks 256] [--throttle 32] [--lines 8]

Each task is a short synthetic job (`--array=0-255%32`): it prints `step N loss X` lines, one every 0.5 s, to its
own output file (slurm-%A_%a.out, read as its text log). Both arrays are guarded through launch/submit.py as the
CLI does (a run record per task); the watchers are the real job scripts (sbatch_templates/monitor.sbatch and
sidecar.sbatch) run by the local backend, each watcher process under /usr/bin/time, so its CPU seconds (user+sys,
interpreter start and imports included) and peak RSS are the kernel's figures. Scheduler calls are what each
watcher's CountedScheduler counted (on Slurm each is at least one slurmctld RPC; on the local backend a per-task
sidecar asks its job's state at every poll, since that costs no RPC there), per hour of the array's wall time (its
first task's start to its last task's end). The anchor's sidecars run at most --parallel at once (a shared machine:
256 Python processes at once is a load of 200 here), each started once its task has; "ends after" is how long after
the last task the one watcher left.
Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# guarded_sbatch is imported only once sys.executable names the timing wrapper: the launch renders the watchers'
# job scripts with the sys.executable it saw at import

NAME = "synthetic-bench-arraywatch"
TASK = """#!/bin/bash
#SBATCH --job-name={name}
for i in $(seq 1 {lines}); do echo "step $i loss 0.$((900 - i))"; sleep 0.5; done
"""
# run only the watchers under /usr/bin/time (the local backend's supervisors run through this python too)
WRAPPER = """#!/bin/bash
case " $* " in
  *" sidecar "*) exec /usr/bin/time -q -f "%U %S %M %e" -a -o "$BENCH_TIMES" "{python}" "$@" ;;
  *) exec "{python}" "$@" ;;
esac
"""


def _phase(root: Path, label: str, tasks: int, throttle: int, lines: int, shared: bool,
           parallel: int = 0) -> dict[str, float]:
    """Launch the array guarded one way, wait until every task and every watcher has ended, return the figures."""
    from guarded_sbatch.core.config import load_config
    from guarded_sbatch.sbatch.array import parse_array_spec
    from guarded_sbatch.launch.monitor_registration import array_watch_options
    from guarded_sbatch.launch.pipeline import watch_table
    from guarded_sbatch.launch.submit import RecordFields, resources_from_config, submit_guarded
    from guarded_sbatch.scheduler import get_scheduler
    from guarded_sbatch.scheduler.interface import SubmitRequest

    state = root / label
    project = root / f"project-{label}"
    project.mkdir()
    name = f"{NAME}-{label}"
    (project / "task.sh").write_text(TASK.format(name=name, lines=lines))
    os.environ["GUARDED_SBATCH_STATE_DIR"] = str(state)
    os.environ["XDG_STATE_HOME"] = str(root / "xdg")
    times = root / f"times-{label}.txt"
    os.environ["BENCH_TIMES"] = str(times)  # the wrapper's output, for this phase's watchers
    config = load_config()
    spec = parse_array_spec(f"0-{tasks - 1}%{throttle}")
    scheduler = get_scheduler("local")
    held = held_sidecars(scheduler)
    started = time.time()
    submission = submit_guarded(
        held, SubmitRequest(script=project / "task.sh", sbatch_options=(f"--array=0-{tasks - 1}%{throttle}",),
                            workdir=project),
        run_name=name, resources=resources_from_config(config),
        record=RecordFields(watch=watch_table(config, stop_command=None, notes=None, array=True)),
        shared=array_watch_options(config, name) if shared else None, task_ids=spec.task_ids)
    ids = spec.task_ids(submission.job_id)
    watchers = sorted({one.sidecar_id for one in submission.tasks})
    ended = held.run_when_started(ids, parallel) if not shared else {}
    while not all(s.is_terminal for s in scheduler.states([*ids, *(w for w in watchers if w not in ended)]).values()):
        time.sleep(2)
    infos = [scheduler.info(job) for job in ids]
    first = min(i.start_time for i in infos if i.start_time)
    last = max(i.end_time for i in infos if i.end_time)
    watched_until = max(ended.get(w) or scheduler.info(w).end_time or last for w in watchers)
    rows = [line.split() for line in times.read_text().splitlines() if re.fullmatch(r"[\d. ]+", line.strip())]
    calls = _calls(state, shared)
    return {"wall_s": last - first, "end_lag_s": watched_until - last, "watched_s": watched_until - first,
            "submit_s": time.time() - started,
            "watchers": len(watchers), "measured": len(rows), "cpu_s": sum(float(r[0]) + float(r[1]) for r in rows),
            "peak_rss_mb": max(int(r[2]) for r in rows) / 1024 if rows else float("nan"),
            "sum_rss_mb": sum(int(r[2]) for r in rows) / 1024, "calls": calls}


def _calls(state: Path, shared: bool) -> float:
    """Scheduler calls: the array watcher's own count (its output's last line), or every sidecar's (its state)."""
    if shared:
        total = 0
        for out in state.glob("shared-monitor/*/array-*/monitor-*.out"):
            found = re.findall(r"(\d+) scheduler calls", out.read_text())
            total += int(found[-1]) if found else 0
        return total
    return sum(float(json.loads(p.read_text()).get("scheduler_calls", 0)) for p in state.glob("runs/*/sidecar-state.json"))


REAL_PYTHON = sys.executable


def held_sidecars(inner: Any) -> Any:
    """The local scheduler, except that a per-task sidecar job is not queued there: the bench starts its job script
    (sidecar.sbatch as rendered) itself, as its `after` (J_T) would, once its task has started. 256 waiting
    sidecar jobs would be 256 local supervisors polling their dependency on this shared machine; the sidecar
    processes, the thing measured, are the same."""
    from guarded_sbatch.scheduler.delegating import DelegatingScheduler
    from guarded_sbatch.scheduler.interface import JobState, SubmitRequest

    class Held(DelegatingScheduler):
        held: dict[str, Path] = {}

        def submit(self, request: SubmitRequest) -> str:
            if request.script.name != "sidecar.sbatch":
                return self.inner.submit(request)
            task = request.after  # the task it follows, in scheduler words
            assert task is not None, "a per-task sidecar starts after its task"
            self.held[task] = request.script
            return f"held-{task}"

        def run_when_started(self, ids: list[str], parallel: int) -> dict[str, float]:
            """Start each task's sidecar once its task has started, at most `parallel` at once (this machine is
            shared; a sidecar whose task has ended when it starts judges it once and leaves, as a queued sidecar job
            would); wait for all of them. When each ended, by sidecar id."""
            running: dict[str, subprocess.Popen[bytes]] = {}
            ended: dict[str, float] = {}
            while len(ended) < len(self.held):
                states = self.inner.states(ids)
                live = sum(1 for task, process in running.items() if f"held-{task}" not in ended)
                for task, script in self.held.items():
                    if live >= parallel:
                        break
                    if task not in running and states.get(task, JobState.PENDING) not in (JobState.PENDING,
                                                                                          JobState.UNKNOWN):
                        with open(script.parent / "sidecar-bench.out", "ab") as out:
                            running[task] = subprocess.Popen(["bash", str(script)], stdout=out,
                                                             stderr=subprocess.STDOUT, cwd=script.parent)
                        live += 1
                for task, process in running.items():
                    if f"held-{task}" not in ended and process.poll() is not None:
                        ended[f"held-{task}"] = time.time()
                time.sleep(0.2)
            return ended

    return Held(inner)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=256)
    parser.add_argument("--throttle", type=int, default=32)
    parser.add_argument("--lines", type=int, default=8, help="metric lines per task, one each 0.5 s")
    parser.add_argument("--parallel", type=int, default=4, help="anchor sidecar processes running at once")
    args = parser.parse_args()
    if not shutil.which("/usr/bin/time"):
        sys.exit("bench_array_watch: /usr/bin/time is needed (apt-get install time)")
    root = Path(tempfile.mkdtemp(prefix="bench-array-watch-"))
    wrapper = root / "python"
    wrapper.write_text(WRAPPER.format(python=REAL_PYTHON))
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    sys.executable = str(wrapper)  # what the watchers' job scripts run (see the imports' note)
    (root / "user.toml").write_text("", encoding="utf-8")
    os.environ["GUARDED_SBATCH_USER_CONFIG"] = str(root / "user.toml")
    os.environ.pop("GUARDED_SBATCH_SITE_CONFIG", None)
    try:
        one = _phase(root, "watcher", args.tasks, args.throttle, args.lines, shared=True)
        each = _phase(root, "per-task", args.tasks, args.throttle, args.lines, shared=False, parallel=args.parallel)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"{args.tasks}-task array (--array=0-{args.tasks - 1}%{args.throttle}, {args.lines} metric lines per task, "
          "local backend, default cadence)")
    print(f"{'':34}{'watcher jobs':>13}{'CPU s':>9}{'peak RSS MB':>13}{'sum RSS MB':>12}{'sched calls':>13}"
          f"{'calls/h':>9}{'array wall s':>14}{'ends after':>12}")
    for label, r in (("one array watcher", one), ("anchor: a sidecar per task", each)):
        per_hour = r["calls"] / (r["wall_s"] / 3600) if r["wall_s"] > 0 else float("nan")
        lag = f"{r['end_lag_s']:>11.1f}s" if label.startswith("one") else f"{'-':>12}"
        print(f"{label:34}{r['watchers']:>13}{r['cpu_s']:>9.1f}{r['peak_rss_mb']:>13.1f}{r['sum_rss_mb']:>12.0f}"
              f"{r['calls']:>13.0f}{per_hour:>9.0f}{r['wall_s']:>14.1f}{lag}")
        if r["measured"] != r["watchers"]:
            print(f"  ({r['measured']} of {r['watchers']} watcher processes measured: the others left no figures)")
    print("peak RSS: of one watcher process; sum RSS: every watcher process's peak added up (what 256 sidecars "
          "hold when the array runs unthrottled). Scheduler calls on Slurm by the cadence (not measured here): one "
          "watcher <= 120 an hour (one query each 30 s for the whole array); a sidecar per task <= 12 an hour each "
          f"plus its job-end watch step, {args.tasks * 13} an hour for {args.tasks} running tasks.")


if __name__ == "__main__":
    main()
