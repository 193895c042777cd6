"""`kill --yes` in a group-writable project folder where a co-worker swapped the run's checkpoint folder: for a
symlink to the victim's final-model/ the link goes at most, never the target; for a folder of their own, or a
folder on the way made a symlink, nothing is crossed; a W&B run named by a planted log is never deleted."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from e2e_helpers import EXAMPLE, EXAMPLE_NAME
from shared_cluster import SharedCluster, User, shared_cluster_fixture  # noqa: F401 - the fixture


def _cli(cluster: SharedCluster, user: User, *args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return cluster.run(user, [str(cluster.python), "-P", "-m", "guarded_sbatch", *args], cwd=cwd,
                       env=cluster.env(user, GUARDED_SBATCH_BACKEND="local"), timeout=timeout)


def _as(cluster: SharedCluster, user: User, script: str) -> None:
    result = cluster.run(user, ["sh", "-c", script], cwd=cluster.project)
    assert result.returncode == 0, result.stderr


def _weights(cluster: SharedCluster, folder: Path) -> Path:
    _as(cluster, cluster.victim, f"mkdir -p {folder} && echo final-weights > {folder}/model.bin")
    return folder / "model.bin"


def test_kill_of_a_live_run_whose_checkpoint_folder_became_a_link_to_final_model(shared_cluster: SharedCluster) -> None:
    cluster = shared_cluster
    project = cluster.copy_project(EXAMPLE, "mlp-kill")
    name = f"{EXAMPLE_NAME}-k{int(time.time()) % 100000}"
    script = project / "train.sh"
    script.write_text(script.read_text().replace(f"--job-name={EXAMPLE_NAME}\n", f"--job-name={name}\n", 1))
    final = _weights(cluster, project / "final-model")
    _as(cluster, cluster.victim, f"mkdir -p {project}/ckpt/a")
    launched = _cli(cluster, cluster.victim, "--guard-checkpoint-dir", "ckpt/a", "train.sh", "--steps", "3000",
                    "--step-seconds", "0.05", cwd=project)
    assert launched.returncode == 0, launched.stderr
    _as(cluster, cluster.coworker, f"rmdir {project}/ckpt/a && ln -s ../final-model {project}/ckpt/a")

    killed = _cli(cluster, cluster.victim, "kill", name, "--yes", cwd=project, timeout=180)
    assert killed.returncode == 0, killed.stderr
    assert f"delete the symlink {project}/ckpt/a only (its target ../final-model is left alone)" in killed.stderr
    assert final.read_text() == "final-weights\n"
    assert not (project / "ckpt" / "a").is_symlink()  # the link itself is the victim's to remove, and went


def _record(cluster: SharedCluster, name: str, **values: object) -> str:
    code = ("import json, sys\nfrom guarded_sbatch.records.registry import create_run\n"
            "values = json.loads(sys.argv[1])\n"
            "print(create_run(values.pop('name'), 'local', '', **values).run_id)\n")
    result = cluster.run(cluster.victim, [str(cluster.python), "-P", "-c", code, json.dumps({"name": name, **values})],
                         cwd=cluster.victim.home)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_kill_never_crosses_a_coworkers_folder_or_a_link_on_the_way(shared_cluster: SharedCluster) -> None:
    cluster = shared_cluster
    project = cluster.project / "swaps"
    _as(cluster, cluster.victim, f"mkdir -p {project}/runs/one/ckpt {project}/runs/two/ckpt {project}/elsewhere/ckpt")
    final = _weights(cluster, project / "runs" / "two" / "ckpt")
    # run one: its checkpoint folder replaced by a group-writable folder of the co-worker's
    theirs = f"{project}/runs/one/ckpt"
    _as(cluster, cluster.coworker, f"rmdir {theirs} && mkdir -m 2775 {theirs} && echo theirs > {theirs}/notes.txt && "
                                   f"chmod 664 {theirs}/notes.txt")
    one = _record(cluster, "coco-resnet50-bs256-one", submit_dir=str(project), checkpoint_dir=f"{project}/runs/one/ckpt")
    refused = _cli(cluster, cluster.victim, "kill", one, "--yes", cwd=cluster.victim.home)
    assert f"belongs to {cluster.coworker.name}, not you: refused" in refused.stderr, refused.stderr
    assert (project / "runs" / "one" / "ckpt" / "notes.txt").read_text() == "theirs\n"
    # run two: recorded under runs/alias/, and the co-worker made `alias` a symlink to the victim's run two
    _as(cluster, cluster.coworker, f"ln -s two {project}/runs/alias")
    two = _record(cluster, "coco-resnet50-bs256-two", submit_dir=str(project), checkpoint_dir=f"{project}/runs/alias/ckpt")
    refused = _cli(cluster, cluster.victim, "kill", two, "--yes", cwd=cluster.victim.home)
    assert "on the way is a symlink: refused" in refused.stderr, refused.stderr
    assert final.read_text() == "final-weights\n"


def test_kill_deletes_only_the_wandb_run_the_launch_gave_the_job(shared_cluster: SharedCluster) -> None:
    cluster = shared_cluster
    project = cluster.project / "tracker"
    planted = project / "wandb" / "run-20260101_120000-theirs"
    _as(cluster, cluster.victim, f"mkdir -p {project}/wandb")
    _as(cluster, cluster.coworker, f"mkdir -p {planted} && echo x > {planted}/run-theirs.wandb")
    run = _record(cluster, "coco-resnet50-bs256-wb", submit_dir=str(project), sources={"specs": [
                      {"kind": "wandb", "locator": "ours123", "writer": {"run_id": "ours123"}}]},
                  tracker={"kind": "wandb", "run_path": "team/coco/theirs", "run_dir": str(planted)})
    killed = _cli(cluster, cluster.victim, "kill", run, "--yes", cwd=cluster.victim.home)
    assert "team/coco/theirs: not the W&B run the launch gave the job (ours123): refused" in killed.stderr, killed.stderr
    assert "not the folder of the W&B run the launch gave the job (ours123); left alone" in killed.stderr
    assert (planted / "run-theirs.wandb").is_file()
