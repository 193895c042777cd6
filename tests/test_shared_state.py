"""The state folder is the user's own and private, like ssh's key folders: a group-writable one inside the
project is repaired, another user's is refused with one line, a co-worker's registration file planted in it never
makes the victim's monitor run the co-worker's command, and everything written under it is 0600/0700 whatever
the umask; the project note is readable by the project folder's group."""

from __future__ import annotations

import json
import math
import os
import stat
import time
from pathlib import Path

from e2e_helpers import EXAMPLE, EXAMPLE_NAME
from shared_cluster import SharedCluster, User, shared_cluster_fixture  # noqa: F401 - the fixture
from source_writers import tb_event, write_tb_events


def _cli(cluster: SharedCluster, user: User, *args: str, cwd: Path, umask: str = "002",
         **env: str) -> tuple[int, str, str]:
    result = cluster.run(user, [str(cluster.python), "-P", "-m", "guarded_sbatch", *args], cwd=cwd, umask=umask,
                         env=cluster.env(user, GUARDED_SBATCH_BACKEND="local", **env), timeout=180)
    return result.returncode, result.stdout, result.stderr


def _chown_tree(path: Path, user: User, gid: int) -> None:
    for item in [path, *path.rglob("*")]:
        os.chown(item, user.uid, gid, follow_symlinks=False)
        item.chmod(0o2775 if item.is_dir() else 0o664)


MONITOR = """
import json, sys
from pathlib import Path
from guarded_sbatch.scheduler.interface import BackendTraits
from guarded_sbatch.records import monitor_registry as registry
from guarded_sbatch.scheduler.interface import JobInfo, JobState
from guarded_sbatch.sidecar.shared_monitor import SharedMonitor
import io

folder, own_run = Path(sys.argv[1]), Path(sys.argv[2])
(own_run / "run.json").write_text(json.dumps({"run_id": "own-run-778", "run_name": "own-run", "backend": "slurm",
                                              "job_id": "778", "tb_paths": [str(own_run / "tb")]}))
registry.register_run(folder, "778", {"run_dir": str(own_run), "run_name": "own-run"})

class Scheduler:  # the monitor's view of the queue: every job it asks about is running
    name = "slurm"
    traits = BackendTraits()
    def __init__(self): self.cancelled = []
    def states(self, ids): return {job: JobState.RUNNING for job in ids}
    def state(self, job): return JobState.CANCELLED if job in self.cancelled else JobState.RUNNING
    def info(self, job): return JobInfo(job, self.state(job), owner="me")
    def cancel(self, job, *, signal_name=None): self.cancelled.append(job)
    def live_steps(self, job): return []
    def current_user(self): return "me"

clock = [1000.0]
def sleep(seconds): clock[0] += seconds
scheduler = Scheduler()
monitor = SharedMonitor(folder, scheduler, io.StringIO(), job_id="900", clock=lambda: clock[0], sleep=sleep)
for _ in range(3):
    monitor.poll(clock[0])
    clock[0] += 60
print(json.dumps({"watched": sorted(monitor.runs) + [], "cancelled": scheduler.cancelled}))
"""


def _nan_run(folder: Path) -> None:
    write_tb_events(folder / "tb", [tb_event(step, "train/loss", math.nan if step >= 60 else 1.0 / step + 0.5)
                                    for step in range(1, 121)])


def test_a_coworkers_registration_in_a_state_folder_inside_the_project_never_acts_as_the_victim(
        shared_cluster: SharedCluster) -> None:
    cluster = shared_cluster
    state = cluster.project / ".guarded-sbatch-state"  # as scripts/demo puts it: inside the shared project folder
    runs = state / "shared-monitor" / "default" / "runs"
    result = cluster.run(cluster.victim, ["mkdir", "-p", str(runs)])  # umask 002 + setgid: the group may write
    assert result.returncode == 0, result.stderr
    assert stat.S_IMODE(os.stat(runs).st_mode) & 0o020
    pwned = cluster.project / "PWNED"
    theirs, own = cluster.project / "their-run", cluster.victim.home / "own-run"
    _nan_run(theirs)
    _chown_tree(theirs, cluster.coworker, cluster.gid)
    _nan_run(own)
    _chown_tree(own, cluster.victim, cluster.victim.gid)
    cluster.write_as(cluster.coworker, runs / "777.json", json.dumps({
        "job_id": "777", "run_dir": str(theirs), "run_name": "theirs", "tb": [str(theirs / "tb")],
        "stop_command": f"touch {pwned}", "registered_at": 1.0}))

    status, _, err = _cli(cluster, cluster.victim, "status", cwd=cluster.victim.home, GUARDED_SBATCH_STATE_DIR=str(state))
    assert status == 0, err
    assert stat.S_IMODE(os.stat(state).st_mode) == 0o700  # repaired, like ssh would insist

    result = cluster.run(cluster.victim, [str(cluster.python), "-P", "-c", MONITOR, str(state / "shared-monitor" / "default"),
                                          str(own)], cwd=cluster.victim.home,
                         env=cluster.env(cluster.victim, GUARDED_SBATCH_STATE_DIR=str(state)))
    assert result.returncode == 0, result.stderr
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome == {"watched": [], "cancelled": ["778"]}  # its own NaN run stopped; the planted one never adopted
    assert not pwned.exists()


def test_another_users_state_folder_is_refused_with_one_line(shared_cluster: SharedCluster) -> None:
    cluster = shared_cluster
    theirs = cluster.project / "their-state"
    assert cluster.run(cluster.coworker, ["mkdir", "-m", "777", str(theirs)]).returncode == 0
    code, out, err = _cli(cluster, cluster.victim, "status", cwd=cluster.victim.home, GUARDED_SBATCH_STATE_DIR=str(theirs))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and f"belongs to {cluster.coworker.name}, not you: refused" in err, err
    assert "Traceback" not in err


def test_everything_under_the_state_folder_is_private_whatever_the_umask(shared_cluster: SharedCluster) -> None:
    cluster = shared_cluster
    project = cluster.copy_project(EXAMPLE, "umask-000")
    name = f"{EXAMPLE_NAME}-u{int(time.time()) % 100000}"
    script = project / "train.sh"
    script.write_text(script.read_text().replace(f"--job-name={EXAMPLE_NAME}\n", f"--job-name={name}\n", 1)
                      .replace("set -euo pipefail\n", "set -euo pipefail\numask 022  # the trainer's files its own: a "
                               "STOP is never read from files others can write (core/file_trust.py)\n", 1))
    notes = project / "NOTES.md"
    state = cluster.victim.home / "state-umask-000"
    cluster.fast_sidecar(cluster.victim)
    code, out, err = _cli(cluster, cluster.victim, "--guard-notes", str(notes), "train.sh", "--steps", "3000",
                          "--diverge-at", "40", "--step-seconds", "0.01", cwd=project, umask="000",
                          GUARDED_SBATCH_STATE_DIR=str(state))
    assert code == 0, err
    job = out.split()[-1]
    deadline = time.time() + 120
    while time.time() < deadline:  # the sidecar stops the run, writes evidence and the note, then ends
        records = [json.loads(p.read_text()) for p in (state / "runs").glob("*/run.json")]
        sidecar = next((r["sidecar_id"] for r in records if r["job_id"] == job), None)
        done = state / "local-jobs" / str(sidecar) / "job.json"
        if sidecar and done.is_file() and json.loads(done.read_text()).get("state") in ("COMPLETED", "FAILED"):
            break
        time.sleep(0.5)
    else:
        raise AssertionError("the sidecar did not end")
    loose = []
    for path in [state, *state.rglob("*")]:
        mode = stat.S_IMODE(os.lstat(path).st_mode)
        if mode & 0o077:
            loose.append(f"{oct(mode)} {path}")
    assert loose == []
    assert list((state / "runs").glob("*/evidence/evidence.json"))
    assert stat.S_IMODE(notes.stat().st_mode) == 0o640 and notes.stat().st_gid == cluster.gid
