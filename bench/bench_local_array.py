"""A laptop's sweep rehearsal on the local backend: a 256-task array (`--array 0-255%8`, each task a short
`sleep`) beside the anchor, the same 256 tasks run by `xargs -P 8` in the same run. Prints the wall time of
each, the submission's time, the supervisor's own CPU, and what one poll of the array watcher costs
(`states()` of the 256 task ids, against asking `state()` once per id). Asserts nothing.

    PYTHONPATH=wrapper .venv/bin/python bench/bench_local_array.py [TASKS] [THROTTLE]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from guarded_sbatch.core.fsutil import read_json
from guarded_sbatch.scheduler.interface import SubmitRequest
from guarded_sbatch.scheduler.local import LocalScheduler

TASK = "#!/bin/bash\nsleep 0.2\necho \"task $SLURM_ARRAY_TASK_ID of $SLURM_ARRAY_TASK_COUNT\"\n"


def anchor(folder: Path, tasks: int, throttle: int) -> float:
    """The same tasks by xargs -P: what running them costs with no scheduler at all."""
    (folder / "plain").mkdir()
    start = time.perf_counter()
    subprocess.run(["xargs", "-P", str(throttle), "-I{}", "sh", "-c",
                    f"SLURM_ARRAY_TASK_ID={{}} SLURM_ARRAY_TASK_COUNT={tasks} bash {folder / 'task.sh'} > plain/{{}}.out"],
                   input="\n".join(map(str, range(tasks))), text=True, cwd=folder, check=True, timeout=600)
    return time.perf_counter() - start


def poll_costs(scheduler: LocalScheduler, ids: list[str]) -> tuple[float, float]:
    start = time.perf_counter()
    scheduler.states(ids)
    one_call = time.perf_counter() - start
    start = time.perf_counter()
    for job in ids:
        scheduler.state(job)
    return one_call, time.perf_counter() - start


def main() -> None:
    tasks = int(sys.argv[1]) if len(sys.argv) > 1 else 256
    throttle = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    folder = Path(tempfile.mkdtemp(prefix="bench-local-array-"))
    os.environ["XDG_STATE_HOME"] = str(folder / "xdg")  # an id sequence of its own
    (folder / "task.sh").write_text(TASK)
    plain = anchor(folder, tasks, throttle)

    scheduler = LocalScheduler(folder / "jobs")
    start = time.perf_counter()
    array = scheduler.submit(SubmitRequest(script=folder / "task.sh", workdir=folder,
                                           sbatch_options=(f"--array=0-{tasks - 1}%{throttle}",)))
    submitted = time.perf_counter() - start
    supervisor = psutil.Process(int(read_json(folder / "jobs" / array / "supervisor.json")["pid"]))
    ids = [f"{array}_{task}" for task in range(tasks)]
    polls: list[tuple[float, float]] = []
    cpu = 0.0
    while not scheduler.state(array).is_terminal:
        try:
            times = supervisor.cpu_times()
            cpu = times.user + times.system  # its own, not the tasks'
        except psutil.Error:
            pass
        if len(polls) < 5:
            polls.append(poll_costs(scheduler, ids))
        time.sleep(0.5)
    wall = time.perf_counter() - start
    ended = scheduler.states(ids)
    done = sum(state.value == "COMPLETED" for state in ended.values())
    one_call = min(p[0] for p in polls) if polls else float("nan")
    per_id = min(p[1] for p in polls) if polls else float("nan")
    print(f"{tasks} tasks of `sleep 0.2`, at most {throttle} at once ({done} COMPLETED)")
    print(f"  anchor  xargs -P {throttle}:                 wall {plain:6.2f} s")
    print(f"  local   --array=0-{tasks - 1}%{throttle}:           wall {wall:6.2f} s "
          f"(submission {submitted:.2f} s, supervisor's own CPU {cpu:.2f} s)")
    print(f"  a watcher's poll of {tasks} task states: states() {one_call * 1000:.0f} ms, "
          f"state() per id {per_id * 1000:.0f} ms (best of {len(polls)})")


if __name__ == "__main__":
    main()
