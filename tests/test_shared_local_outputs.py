"""Issue 35's write attacks on a local job's output, with two real Unix users in a setgid 2775 project folder
under umask 002: the co-worker plants `slurm-<id>.out -> ~victim/.bashrc` for the ids the victim is likely to
get next, a file of his own (which he can read) at the victim's fixed `--output`, and a FIFO at another. The
victim's job never writes through the link, never into his file, never hangs on the FIFO, never through a
folder he swapped for a link; each refusal is one line."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from shared_cluster import SharedCluster, shared_cluster_fixture  # noqa: F401 - the fixture

SUBMIT = """
import json, sys, time
from pathlib import Path
from guarded_sbatch.core.errors import GuardedError
from guarded_sbatch.scheduler.interface import SubmitRequest
from guarded_sbatch.scheduler.local import LocalScheduler
script = Path(sys.argv[1])
scheduler = LocalScheduler()
try:
    job = scheduler.submit(SubmitRequest(script=script, sbatch_options=tuple(sys.argv[2:]), workdir=script.parent))
except GuardedError as exc:
    print(json.dumps({"refused": str(exc)}))
    sys.exit(0)
deadline = time.monotonic() + 60
while not scheduler.state(job).is_terminal and time.monotonic() < deadline:
    time.sleep(0.1)
info = scheduler.info(job)
print(json.dumps({"job": job, "state": info.state.value, "stdout": info.stdout_path, "reason": info.reason}))
"""
BASHRC = "# the victim's shell start-up\n"


def _submit(cluster: SharedCluster, *options: str) -> dict:
    script = cluster.project / "outputs" / "train.sh"
    result = cluster.run(cluster.victim, [str(cluster.python), "-P", "-c", SUBMIT, str(script), *options], timeout=90)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_a_coworkers_planted_outputs_are_never_written_through(shared_cluster: SharedCluster) -> None:
    cluster = shared_cluster
    folder = cluster.project / "outputs"
    cluster.write_as(cluster.victim, folder / "train.sh", "#!/bin/bash\necho '{loss:: 1.0}'\n", mode="775")
    bashrc = cluster.victim.home / ".bashrc"
    cluster.write_as(cluster.victim, bashrc, BASHRC, mode="644")
    guesses = [str(folder / f"slurm-{job}.out") for job in range(1, 21)]  # a fresh user's first ids
    planted = cluster.run(cluster.coworker, ["sh", "-c", 'for p; do ln -s "$0" "$p"; done', str(bashrc), *guesses])
    assert planted.returncode == 0, planted.stderr

    ran = _submit(cluster)
    assert ran["state"] == "COMPLETED", ran
    assert int(ran["job"]) > 20  # every planted id skipped
    output = os.lstat(ran["stdout"])
    assert stat.S_ISREG(output.st_mode) and output.st_uid == cluster.victim.uid
    assert Path(ran["stdout"]).read_text() == "{loss:: 1.0}\n"
    assert bashrc.read_text() == BASHRC

    cluster.write_as(cluster.coworker, folder / "theirs.out", "", mode="664")
    refused = _submit(cluster, "--output=theirs.out")
    assert "theirs.out belongs to another user" in refused.get("refused", ""), refused
    assert (folder / "theirs.out").read_text() == ""

    made = cluster.run(cluster.coworker, ["mkfifo", "-m", "666", str(folder / "pipe.out")])
    assert made.returncode == 0, made.stderr
    refused = _submit(cluster, "--output=pipe.out")
    assert "pipe.out is a FIFO" in refused.get("refused", ""), refused
    assert "\n" not in refused["refused"]

    swapped = cluster.run(cluster.coworker, ["ln", "-s", str(cluster.victim.home), str(folder / "logs")])
    assert swapped.returncode == 0, swapped.stderr  # her logs/ folder, as he would swap it in a 2775 folder
    refused = _submit(cluster, "--output=logs/.bashrc")
    assert "logs is a link another user made" in refused.get("refused", ""), refused
    assert bashrc.read_text() == BASHRC
