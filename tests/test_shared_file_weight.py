"""Round 3 of the shared cluster, reads: a file's weight is who can write it, and every read is bounded. Two real
users in a 2775 project folder under umask 002: the co-worker appends NaN records to the victim's group-writable
event file (a WAIT naming the file's mode and the fix, never a STOP), extends it with an 8 GB hole (skipped at
once, named as damage, never "healthy"), and the same run written under umask 022 is judged on its own; a 100 MB
hole without a newline in a text log does not hide the NaN lines after it; a log command that prints 2 GB is read
over its last 16 MB; a planted `configs/zz.yaml -> /dev/zero` and a FIFO never hang or fill the pre-flight."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from e2e_helpers import EXAMPLE
from shared_cluster import REPO, SharedCluster, User, shared_cluster_fixture  # noqa: F401 - the fixture
from source_writers import tb_event, write_tb_events

LIMIT_KB = 1536 * 1024  # address space of the victim's processes: far below what reading a hole whole takes


def _events(cluster: SharedCluster, name: str, losses: list[float], first: int = 1) -> Path:
    """An event file written by tensorboard's own writer (as root, in a folder both users can read)."""
    folder = cluster.base / "made" / name
    events = [tb_event(s, "train/loss", v, wall_time=time.time()) for s, v in enumerate(losses, first)]
    event_file = write_tb_events(folder, events)
    os.chmod(folder.parent, 0o755)
    os.chmod(folder, 0o755)
    event_file.chmod(0o644)
    return event_file


def _copy_as(cluster: SharedCluster, user: User, source: Path, target: Path, umask: str) -> None:
    """`target` (and its folder) created by `user` under `umask`, with source's bytes: what their trainer writes."""
    result = cluster.run(user, ["sh", "-c", 'mkdir -p "$(dirname "$2")" && cat "$1" > "$2"', "sh", str(source), str(target)],
                         umask=umask)
    assert result.returncode == 0, result.stderr


def _monitor(cluster: SharedCluster, *args: str, umask: str = "002") -> dict:
    """`monitor --once --json` as the victim, under an address-space limit and a hang guard."""
    argv = ["prlimit", f"--as={LIMIT_KB * 1024}", "--", str(cluster.python), "-P", "-m", "guarded_sbatch", "monitor",
            "--once", "--json", *args]
    result = cluster.run(cluster.victim, argv, cwd=cluster.base, timeout=240, umask=umask)
    assert "Traceback" not in result.stderr and "MemoryError" not in result.stderr, result.stderr[-2000:]
    return json.loads(result.stdout)


def test_a_coworkers_nan_records_in_a_group_writable_event_file_never_stop_the_run(shared_cluster: SharedCluster) -> None:
    cluster = shared_cluster
    healthy = _events(cluster, "healthy", [2.0 / s + 0.1 for s in range(1, 200)])
    nans = _events(cluster, "nans", [float("nan")] * 5, first=200)
    shared = cluster.project / "weight" / "runs" / "a" / healthy.name
    _copy_as(cluster, cluster.victim, healthy, shared, umask="002")  # the site's umask: 0664 in a 2775 folder
    assert oct(shared.stat().st_mode & 0o777) == "0o664"
    attack = cluster.run(cluster.coworker, ["sh", "-c", f"cat {nans} >> {shared}"])
    assert attack.returncode == 0, attack.stderr  # the co-worker can write it: the owner check alone passes
    answer = _monitor(cluster, "--tb", str(shared.parent))
    assert answer["decision"] == "WAIT" and answer["reason"] == "source_writable_by_others", answer
    assert "would STOP (non_finite_loss" in answer["message"] and "mode 0664" in answer["message"], answer["message"]
    assert "umask 022" in answer["message"]  # the fix, named

    # the fix: the job's umask 022. Its folder and file are its own; the co-worker's append is refused, and the
    # run's own NaN stops it
    private = cluster.project / "weight" / "runs" / "b" / healthy.name
    _copy_as(cluster, cluster.victim, healthy, private, umask="022")
    refused = cluster.run(cluster.coworker, ["sh", "-c", f"cat {nans} >> {private}"])
    assert refused.returncode != 0 and "Permission denied" in refused.stderr
    assert _monitor(cluster, "--tb", str(private.parent))["decision"] == "CONTINUE"
    own = cluster.run(cluster.victim, ["sh", "-c", f"cat {nans} >> {private}"], umask="022")
    assert own.returncode == 0, own.stderr
    answer = _monitor(cluster, "--tb", str(private.parent))
    assert answer["decision"] == "STOP" and answer["reason"] == "non_finite_loss", answer


def test_an_8_gb_hole_in_an_event_file_is_skipped_at_once_and_named_as_damage(shared_cluster: SharedCluster) -> None:
    cluster = shared_cluster
    healthy = _events(cluster, "hole", [2.0 / s + 0.1 for s in range(1, 200)])
    shared = cluster.project / "hole" / "runs" / "a" / healthy.name
    _copy_as(cluster, cluster.victim, healthy, shared, umask="002")
    assert cluster.run(cluster.coworker, ["truncate", "-s", "+8G", str(shared)]).returncode == 0
    started = time.monotonic()
    answer = _monitor(cluster, "--tb", str(shared.parent))
    took = time.monotonic() - started
    assert answer["decision"] == "WAIT" and answer["reason"] == "source_damaged", answer
    assert "a hole of 8.0 GB" in answer["message"] and shared.name in answer["message"], answer["message"]
    print(f"monitor --once over an event file with an 8 GB hole: {took:.1f} s")


def test_a_hole_without_a_newline_in_a_text_log_does_not_hide_the_nan_after_it(shared_cluster: SharedCluster) -> None:
    cluster = shared_cluster
    folder = cluster.victim.home / "logs"  # the victim's own, private log
    lines = "".join(f"{{'loss': {2.0 / s + 0.1:.4f}, 'grad_norm': 1.0, 'learning_rate': 0.001, 'step': {s}}}\n"
                    for s in range(1, 60)) + "{'loss': 0.3"
    nan = "".join(f"{{'loss': nan, 'grad_norm': nan, 'learning_rate': 0.001, 'step': {s}}}\n" for s in range(60, 90))
    script = (f'mkdir -p {folder} && printf "%s" "$1" > {folder}/train.log && truncate -s +100M {folder}/train.log && '
              f'printf "%s" "$2" >> {folder}/train.log')
    assert cluster.run(cluster.victim, ["sh", "-c", script, "sh", lines, nan], umask="022").returncode == 0
    answer = _monitor(cluster, "--log", str(folder / "train.log"))
    assert answer["decision"] == "STOP" and answer["reason"] == "non_finite_loss" and answer["last_step"] == 89, answer


def test_a_log_command_printing_2_gb_is_read_over_its_last_bytes(shared_cluster: SharedCluster) -> None:
    cluster = shared_cluster
    log = cluster.victim.home / "cmd" / "train.log"
    healthy = "".join(f"{{'loss': {2.0 / s + 0.1:.4f}, 'grad_norm': 1.0, 'learning_rate': 0.001, 'step': {s}}}\n"
                      for s in range(1, 80))
    script = f'mkdir -p {log.parent} && printf "%s" "$1" > {log} && truncate -s +2G {log} && printf "%s" "$1" >> {log}'
    assert cluster.run(cluster.victim, ["sh", "-c", script, "sh", healthy], umask="022").returncode == 0
    answer = _monitor(cluster, "--log-command", f"tail -n 100 {log}", "--log-command-timeout", "120")
    assert answer["decision"] == "WAIT" and answer["reason"] == "source_damaged", answer  # never "healthy"
    assert "printed a run of zero bytes" in answer["message"], answer["message"]


def test_a_planted_dev_zero_config_and_a_fifo_never_hang_or_fill_the_preflight(shared_cluster: SharedCluster) -> None:
    cluster = shared_cluster
    project = cluster.copy_project(EXAMPLE, "zero")
    planted = ["ln -s /dev/zero configs/zz.yaml", "mkfifo configs/zy.yaml", "mkdir -p experiments/old",
               "ln -s /dev/zero experiments/old/config.yaml", "mkfifo experiments/old/train.log"]
    assert cluster.run(cluster.coworker, ["sh", "-c", " && ".join(planted)], cwd=project).returncode == 0
    env = cluster.env(cluster.victim, GUARDED_SBATCH_BACKEND="local", OPENBLAS_NUM_THREADS="1")
    check = cluster.run(cluster.victim, ["prlimit", f"--as={LIMIT_KB * 1024}", "--", str(cluster.python), "-P", "-m",
                                         "guarded_sbatch", "check", "train.sh"], cwd=project, env=env, timeout=180)
    assert check.returncode in (0, 3), check.stderr
    assert "Traceback" not in check.stderr and "MemoryError" not in check.stderr, check.stderr[-2000:]
    assert "config-diff" in check.stderr


def test_the_bounded_reader_refuses_what_is_not_a_regular_file(tmp_path: Path) -> None:
    from guarded_sbatch.core.fsutil import TooLargeError, read_bounded

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, why in ((fifo, "a FIFO"), (Path("/dev/zero"), "a device"), (tmp_path, "Is a directory")):
        try:
            read_bounded(path, 1024)
        except OSError as exc:
            assert why in str(exc), exc
        else:
            raise AssertionError(f"{path} was read")
    big = tmp_path / "big"
    big.write_bytes(b"x" * 2048)
    try:
        read_bounded(big, 1024)
    except TooLargeError as exc:
        assert exc.size == 2048
    else:
        raise AssertionError("a file over the cap was read")
    assert read_bounded(big, 1024, head=True) == b"x" * 1024
    assert len(read_bounded("/proc/self/status", 64, head=True)) == 64  # size 0, read up to the cap only
    from guarded_sbatch.core.runner import run_command_tail  # a command's output kept to its last bytes

    result, dropped = run_command_tail(["head", "-c", "5000000", "/dev/zero"], timeout=30, max_bytes=1000)
    assert len(result.stdout) == 1000 and dropped == 5_000_000 - 1000


def _wait_for_sidecar_end(cluster: SharedCluster, job_id: str, deadline_s: float) -> tuple[dict, str, str]:
    """(the run record, the sidecar's output, the training job's end state) once the guard of `job_id` has ended."""
    state = cluster.victim.home / ".local" / "state" / "guarded-sbatch"
    deadline = time.time() + deadline_s
    while time.time() < deadline:
        records = [json.loads(p.read_text()) for p in (state / "runs").glob("*/run.json")]
        record = next((r for r in records if r.get("job_id") == job_id), {})
        sidecar = state / "local-jobs" / str(record.get("sidecar_id", "none")) / "job.json"
        if sidecar.is_file() and json.loads(sidecar.read_text()).get("state") in ("COMPLETED", "FAILED", "CANCELLED"):
            output = "".join(p.read_text(errors="replace") for p in (state / "runs" / record["run_id"]).glob("sidecar-*.out"))
            job = json.loads((state / "local-jobs" / job_id / "job.json").read_text())
            return record, output, str(job.get("state"))
        time.sleep(0.5)
    raise AssertionError(f"the sidecar of job {job_id} did not end in time")


@pytest.mark.waits
def test_a_live_run_is_not_cancelled_by_a_coworkers_nan_records_or_spun_by_his_hole(shared_cluster: SharedCluster) -> None:
    """A real guarded launch under the site's umask 002: the co-worker appends NaN records to the run's event file
    and then an 8 GB hole; the run ends COMPLETED (not cancelled), the sidecar's report names the file's mode and
    the fix, and the hole as damage."""
    cluster = shared_cluster
    project = cluster.copy_project(EXAMPLE, "live")
    cluster.fast_sidecar(cluster.victim)
    nans = _events(cluster, "live-nans", [float("nan")] * 5, first=5000)
    env = cluster.env(cluster.victim, GUARDED_SBATCH_BACKEND="local", OPENBLAS_NUM_THREADS="1")
    submitted = cluster.run(cluster.victim, [str(REPO / "shims" / "sbatch"), "train.sh", "--steps", "2500",
                                             "--step-seconds", "0.01"], cwd=project, env=env)
    assert submitted.returncode == 0, submitted.stderr
    assert "writable by the group" in submitted.stderr  # the pre-flight said so before the run started
    job_id = submitted.stdout.split()[-1]
    deadline = time.time() + 60
    while not (found := sorted(project.glob("runs/*/events.out.tfevents.*"))) and time.time() < deadline:
        time.sleep(0.2)
    assert found, "the trainer wrote no event file"
    time.sleep(3)  # a few healthy polls first
    attack = cluster.run(cluster.coworker, ["sh", "-c", f'cat {nans} >> "$1" && sleep 4 && truncate -s +8G "$1"', "sh",
                                            str(found[0])])
    assert attack.returncode == 0, attack.stderr
    _, output, state = _wait_for_sidecar_end(cluster, job_id, 240)
    assert state == "COMPLETED", output[-3000:]
    assert "source_writable_by_others" in output and "mode 0664" in output, output[-3000:]
    assert "Decision: STOP" not in output, output[-3000:]
    assert "source_damaged" in output or "a hole of 8.0 GB" in output, output[-3000:]


def test_who_can_write_a_file_is_read_from_its_mode_its_group_and_its_folder(shared_cluster: SharedCluster) -> None:
    from guarded_sbatch.core.file_trust import writable_by_others

    cluster = shared_cluster
    cases = {  # folder mode, file mode, the file's group: the project's (shared) or the victim's private one
        "private": ("0755", "0644", "own", ""),
        "group-file": ("0755", "0664", "shared", "writable by its group (mode 0664)"),
        "own-group-file": ("0755", "0664", "own", ""),  # a user private group: nobody else is in it
        "world-file": ("0755", "0646", "own", "writable by every user"),
        "shared-folder": ("2775", "0644", "shared", "writable by its group (mode 2775): the file can be swapped"),
        "sticky-folder": ("1777", "0644", "own", ""),  # /tmp: only the owner renames or deletes
    }
    base = cluster.base / "modes"
    base.mkdir()
    base.chmod(0o755)
    for name, (folder_mode, file_mode, group, _) in cases.items():
        gid = cluster.gid if group == "shared" else cluster.victim.gid
        script = (f'mkdir {base / name} && chgrp {gid} {base / name} && chmod {folder_mode} {base / name} && '
                  f'touch {base / name}/f && chgrp {gid} {base / name}/f && chmod {file_mode} {base / name}/f')
        os.chown(base, cluster.victim.uid, cluster.gid)
        assert cluster.run(cluster.victim, ["sh", "-c", script]).returncode == 0, name
    for name, (*_, expected) in cases.items():
        path = base / name / "f"
        why = writable_by_others(path, os.stat(path))
        assert (expected in why) if expected else why == "", (name, why)
