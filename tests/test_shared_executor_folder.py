"""Issue 35 for GuardedExecutor, with two real Unix users in a setgid 2775 project folder under umask 002: the
executor's folder is made private (0700) and one a co-worker owns or can write is refused in one line; a result
pickle is unpickled only when nobody but the user can have written it, so a co-worker's planted pickle (whose
loading would run his command as the victim) is refused and never loaded."""

from __future__ import annotations

import json
import os
import stat

from shared_cluster import SharedCluster, shared_cluster_fixture  # noqa: F401 - the fixture

FOLDERS = """
import json, os, stat, sys
from guarded_sbatch.core.errors import GuardedError
from guarded_sbatch.launch.executor import GuardedExecutor
seen = {}
for name in sys.argv[1:]:
    try:
        GuardedExecutor(folder=name + "/%j", run_name="probe-mlp-bs1-lr1", cluster="debug")
        seen[name] = oct(stat.S_IMODE(os.stat(name).st_mode))
    except GuardedError as exc:
        seen[name] = "refused: " + str(exc)
print(json.dumps(seen))
"""
PLANT = """
import os, pickle, sys
class Payload:
    def __reduce__(self):
        return (os.system, ("touch " + sys.argv[2],))
os.makedirs(os.path.dirname(sys.argv[1]), exist_ok=True)
with open(sys.argv[1], "wb") as out:
    pickle.dump(Payload(), out)
print("{}")
"""
RESULT = """
import json, sys
from pathlib import Path
from guarded_sbatch.launch.executor import GuardedSchedulerJob
from guarded_sbatch.launch.job_folder import UntrustedResultError
job = GuardedSchedulerJob(folder=Path(sys.argv[1]), job_id="999", tasks=[0])
try:
    print(json.dumps({"loaded": job._get_outcome_and_result()}))  # what job.result() does once the job ended
except UntrustedResultError as exc:
    print(json.dumps({"refused": str(exc)}))
"""


def _as(cluster: SharedCluster, user: object, code: str, *args: str) -> dict:
    result = cluster.run(user, [str(cluster.python), "-P", "-c", code, *args], timeout=90)  # type: ignore[arg-type]
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_the_executors_folder_is_private_and_a_coworkers_is_refused(shared_cluster: SharedCluster) -> None:
    cluster = shared_cluster
    theirs = cluster.project / "executor-theirs"
    assert cluster.run(cluster.coworker, ["mkdir", "-p", str(theirs)]).returncode == 0  # 2775 under umask 002
    shared = cluster.project / "executor-shared"
    assert cluster.run(cluster.victim, ["mkdir", "-p", str(shared)]).returncode == 0
    fresh = cluster.project / "executor-new"
    seen = _as(cluster, cluster.victim, FOLDERS, str(fresh), str(theirs), str(shared))
    assert seen[str(fresh)] == "0o700", seen  # made private whatever the umask and the folder's setgid
    assert seen[str(theirs)].startswith("refused: ") and f"belongs to {cluster.coworker.name}" in seen[str(theirs)]
    assert seen[str(shared)].startswith("refused: ") and "writable by others" in seen[str(shared)], seen
    assert all("\n" not in text for text in seen.values())
    planted = cluster.run(cluster.coworker, ["touch", str(fresh / "planted")])
    assert planted.returncode != 0 and not (fresh / "planted").exists()  # the co-worker cannot write there


def test_a_planted_result_is_never_unpickled(shared_cluster: SharedCluster) -> None:
    cluster = shared_cluster
    marker = cluster.project / "PLANTED-CODE-RAN"
    cases = {
        "in a co-worker's folder": (cluster.coworker, cluster.project / "results-theirs"),
        "in the victim's group-writable folder": (cluster.victim, cluster.project / "results-shared"),
    }
    for why, (owner, folder) in cases.items():
        assert cluster.run(owner, ["mkdir", "-p", str(folder)]).returncode == 0
        if owner == cluster.victim:
            os.chmod(folder, 0o2775)  # as the victim's umask 002 leaves it
        result = folder / "999_0_result.pkl"
        _as(cluster, cluster.coworker, PLANT, str(result), str(marker))
        seen = _as(cluster, cluster.victim, RESULT, str(folder))
        assert "refused" in seen and "not unpickling the job's result" in seen["refused"], (why, seen)
        assert not marker.exists(), why
    own = cluster.project / "results-own"
    assert cluster.run(cluster.victim, ["mkdir", "-p", str(own)]).returncode == 0
    os.chmod(own, 0o700)
    code = f"import pickle; pickle.dump(('success', 5), open({str(own / '999_0_result.pkl')!r}, 'wb'))"
    assert cluster.run(cluster.victim, [str(cluster.python), "-c", code], umask="077").returncode == 0
    assert stat.S_IMODE(os.stat(own / "999_0_result.pkl").st_mode) == 0o600
    assert _as(cluster, cluster.victim, RESULT, str(own)) == {"loaded": ["success", 5]}  # the user's own loads
