"""Round 4 of the shared cluster: one door for every file the tool touches (core/door/). Two real Unix users in one
group, a setgid 2775 project folder, umask 002 (and a folder with default POSIX ACLs under umask 022); the
co-worker plays each class of attack and each fails, or the documented policy holds and the output says so:

- a deletion whose parent folder he swaps for a link to the victim's home (before the plan, and after it);
- hangs: a FIFO at her per-user audit file, an exclusive lock on the shared audit file, a shared lock on her notes;
- code through configuration: a config file or a template folder he can write;
- writers mode bits do not show: a default ACL makes her event file his to write;
- a link planted at `show --png`'s output path;
- her group-writable reference config rewritten in place;
- planted `slurm-<N>.out` files for her next local job ids.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from e2e_helpers import EXAMPLE
from finished_runs import record_baseline_as
from shared_cluster import SharedCluster, User, shared_cluster_fixture  # noqa: F401 - the fixture
from test_shared_file_weight import _copy_as, _events, _monitor
from test_shared_reference import BLOCK, _check, _config_diff

HANG_S = 30  # each victim command's own time limit: a hang fails the test, never the suite


def _py(cluster: SharedCluster, user: User, code: str, *args: str, umask: str = "002",
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return cluster.run(user, [str(cluster.python), "-P", "-c", code, *args], cwd=cluster.base, timeout=HANG_S,
                       umask=umask, env=cluster.env(user, **(env or {})))


def _sh(cluster: SharedCluster, user: User, script: str, umask: str = "002") -> None:
    result = cluster.run(user, ["sh", "-c", script], umask=umask)
    assert result.returncode == 0, result.stderr


def _hold(cluster: SharedCluster, user: User, *argv: str) -> subprocess.Popen[str]:
    """A long-running command as `user` (a lock held), ended by the test by its pid."""
    return subprocess.Popen(["setpriv", f"--reuid={user.uid}", f"--regid={user.gid}", "--init-groups", "--", *argv],
                            env=cluster.env(user), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)


def _wait_for(condition, what: str, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _locked_by_other(path: Path) -> bool:
    out = subprocess.run(["flock", "-n", "-x", str(path), "true"], capture_output=True, timeout=10)
    return out.returncode != 0


# ---- delete only what the plan saw ----

_PLAN = """
import json, sys
from pathlib import Path
from guarded_sbatch.actions.path_guard import PathRefusedError, check_deletable
try:
    g = check_deletable(sys.argv[1], recorded_paths=[sys.argv[1]], roots=[Path(sys.argv[2])], homes=set())
except PathRefusedError as exc:
    print(json.dumps({"refused": str(exc)})); raise SystemExit(0)
print(json.dumps({"recorded": str(g.recorded), "resolved": str(g.resolved), "root": str(g.root),
                  "identities": g.identities}))
"""
_DELETE = """
import json, sys
from pathlib import Path
from guarded_sbatch.actions.path_guard import GuardedPath, PathRefusedError, delete_guarded
p = json.loads(sys.argv[1])
g = GuardedPath(Path(p["recorded"]), Path(p["resolved"]), Path(p["root"]), False,
                identities=tuple(tuple(i) for i in p["identities"]))
try:
    print(delete_guarded(g))
except PathRefusedError as exc:
    print("REFUSED", exc)
"""


def test_a_parent_swapped_for_a_link_to_her_home_is_never_deleted_through(shared_cluster: SharedCluster) -> None:
    cluster = shared_cluster
    victim, coworker = cluster.victim, cluster.coworker
    shared = cluster.project / "door-del"
    _sh(cluster, victim, f"mkdir -p {shared}/runs/ckpt && echo shared > {shared}/runs/ckpt/w.bin")
    _sh(cluster, victim, f"mkdir -p {victim.home}/runs/ckpt && echo precious > {victim.home}/runs/ckpt/w.bin")
    target, root = f"{shared}/runs/ckpt", f"{shared}/runs"

    # after the plan was shown: the co-worker swaps her folder for a link to her home
    planned = json.loads(_py(cluster, victim, _PLAN, target, root).stdout)
    assert "identities" in planned and len(planned["identities"]) == 2  # the root, the target, planned
    _sh(cluster, coworker, f"mv {shared} {shared}.old && ln -s {victim.home} {shared}")
    done = _py(cluster, victim, _DELETE, json.dumps(planned))
    assert done.stdout.startswith("REFUSED") and "changed since the plan" in done.stdout, done
    assert (victim.home / "runs" / "ckpt" / "w.bin").read_text() == "precious\n"

    # before the plan: the link on the way is named as his and refused
    replanned = json.loads(_py(cluster, victim, _PLAN, target, root).stdout)
    assert "refused" in replanned and f"made by {coworker.name}" in replanned["refused"], replanned
    assert (victim.home / "runs" / "ckpt" / "w.bin").read_text() == "precious\n"
    assert (cluster.project / "door-del.old" / "runs" / "ckpt" / "w.bin").read_text() == "shared\n"


# ---- never block ----

_AUDIT = """
import sys, time
from pathlib import Path
from guarded_sbatch.records.audit import AuditLog
start = time.monotonic()
problem = AuditLog(Path(sys.argv[1])).record("launch", job="1", run="r")
print(f"{time.monotonic() - start:.1f}|{problem}")
"""


def test_a_fifo_or_a_held_lock_in_the_audit_trail_is_a_named_failure_never_a_hang(shared_cluster: SharedCluster) -> None:
    cluster = shared_cluster
    victim, coworker = cluster.victim, cluster.coworker
    folder = cluster.base / "door-audit"
    folder.mkdir()
    os.chmod(folder, 0o1733)  # the admin's per-user audit folder
    _sh(cluster, coworker, f"mkfifo -m 666 {folder}/{victim.name}.jsonl")
    took, problem = _py(cluster, victim, _AUDIT, str(folder)).stdout.strip().split("|", 1)
    assert float(took) < 5 and "a FIFO, not a regular file" in problem, problem

    shared = cluster.base / "door-audit.jsonl"
    shared.touch()
    os.chmod(shared, 0o622)  # the one file for everyone: all append, nobody but its owner reads
    assert _py(cluster, victim, _AUDIT, str(shared)).stdout.strip().endswith("|None")
    holder = _hold(cluster, coworker, "sh", "-c", f"exec 3>>{shared} && flock -x 3 && exec sleep 60")
    try:
        _wait_for(lambda: _locked_by_other(shared), "the co-worker's lock")
        took, problem = _py(cluster, victim, _AUDIT, str(shared)).stdout.strip().split("|", 1)
        assert float(took) < 10 and "locked by another process" in problem, problem
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=10)


def test_a_shared_lock_on_her_notes_fails_the_note_and_never_freezes_her(shared_cluster: SharedCluster) -> None:
    cluster = shared_cluster
    notes = cluster.project / "door-notes" / "NOTES.md"
    code = ("import sys\nfrom pathlib import Path\nfrom guarded_sbatch.actions.notes import NotesError, "
            "append_project_note\ntry:\n    append_project_note(Path(sys.argv[1]), 'STOP: loss is nan')\n"
            "    print('written')\nexcept NotesError as exc:\n    print(exc)\n")
    assert _py(cluster, cluster.victim, code, str(notes)).stdout.strip() == "written"
    assert oct(notes.stat().st_mode & 0o777) == "0o640"  # the group reads it: enough for `flock -s`
    holder = _hold(cluster, cluster.coworker, "sh", "-c", f"exec 3<{notes} && flock -s 3 && exec sleep 60")
    try:
        _wait_for(lambda: _locked_by_other(notes), "the co-worker's shared lock")
        result = _py(cluster, cluster.victim, code, str(notes))
        assert "locked by another process" in result.stdout, result
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=10)


def test_a_hard_link_he_puts_at_her_notes_is_refused_and_her_config_unchanged(shared_cluster: SharedCluster) -> None:
    cluster = shared_cluster
    folder = cluster.project / "door-hardlink"
    config, notes = folder / "config.yaml", folder / "NOTES.md"
    _sh(cluster, cluster.victim, f"mkdir -p {folder} && printf 'lr: 0.1\\n' > {config} && printf '# notes\\n' > {notes}")
    # her config is group-writable, so the kernel lets him link it (fs.protected_hardlinks): NOTES.md is her config now
    _sh(cluster, cluster.coworker, f"rm -f {notes} && ln {config} {notes}")
    code = ("import sys\nfrom pathlib import Path\nfrom guarded_sbatch.actions.notes import NotesError, "
            "append_project_note\ntry:\n    append_project_note(Path(sys.argv[1]), 'STOP: loss is nan')\n"
            "    print('written')\nexcept NotesError as exc:\n    print(exc)\n")
    result = _py(cluster, cluster.victim, code, str(notes))
    assert "a hard link (2 names for one file): refused" in result.stdout, result
    assert config.read_text() == "lr: 0.1\n"


# ---- configuration is trusted as code ----

def test_a_config_or_template_a_coworker_can_write_is_refused_with_the_reason(shared_cluster: SharedCluster) -> None:
    cluster = shared_cluster
    victim = cluster.victim
    config = cluster.project / "door-config" / "group.toml"
    cluster.write_as(victim, config, '[sidecar]\nmem = "400M"\n', mode="664")  # a group module's shared config
    load = "from guarded_sbatch.core.config import load_config\nload_config()\nprint('loaded')\n"
    for name in ("GUARDED_SBATCH_USER_CONFIG", "GUARDED_SBATCH_SITE_CONFIG"):
        result = _py(cluster, victim, load, env={name: str(config)})
        assert result.returncode != 0 and f"config {config} refused" in result.stderr, result
        assert "writable by its group" in result.stderr, result.stderr
    own = victim.home / "own.toml"  # her own copy in her home is hers alone: loaded
    cluster.write_as(victim, own, '[sidecar]\nmem = "400M"\n', mode="600")
    assert _py(cluster, victim, load, env={"GUARDED_SBATCH_USER_CONFIG": str(own)}).stdout.strip() == "loaded"

    templates = cluster.project / "door-templates"
    cluster.write_as(cluster.coworker, templates / "sidecar.sbatch", "#!/bin/bash\necho his line runs as you\n")
    code = ("import sys\nfrom pathlib import Path\nfrom guarded_sbatch.core.errors import UsageError\n"
            "from guarded_sbatch.launch.templates import load_template\ntry:\n"
            "    load_template('sidecar.sbatch', [Path(sys.argv[1])])\nexcept UsageError as exc:\n    print(exc)\n")
    shown = _py(cluster, victim, code, str(templates)).stdout
    assert f"template {templates}/sidecar.sbatch refused" in shown and f"belongs to {cluster.coworker.name}" in shown


# ---- writers mode bits do not show: default ACLs ----

@pytest.mark.skipif(shutil.which("setfacl") is None, reason="needs setfacl (Debian's acl; scripts/lib/venv.sh)")
def test_a_default_acl_makes_her_event_file_his_and_a_stop_on_it_a_named_wait(shared_cluster: SharedCluster) -> None:
    cluster = shared_cluster
    victim, coworker = cluster.victim, cluster.coworker
    folder = cluster.base / "door-acl"
    folder.mkdir()
    os.chown(folder, victim.uid, victim.gid)
    os.chmod(folder, 0o755)  # her own folder, not group-writable by its mode bits
    _sh(cluster, victim, f"setfacl -m g:{cluster.group}:rwx -d -m g:{cluster.group}:rwx {folder}", umask="022")
    note = _py(cluster, victim, "import sys\nfrom guarded_sbatch.core.file_trust import outputs_note\n"
               "print(outputs_note(sys.argv[1], 0o022))", str(folder), umask="022").stdout
    assert "default ACL" in note and cluster.group in note, note  # the pre-flight says so before the run

    healthy = _events(cluster, "acl-healthy", [2.0 / s + 0.1 for s in range(1, 200)])
    nans = _events(cluster, "acl-nans", [float("nan")] * 5, first=200)
    event = folder / "run" / healthy.name
    _copy_as(cluster, victim, healthy, event, umask="022")
    assert event.stat().st_mode & 0o022 == 0o020  # the mask shows as group bits: the ACL gives the write
    attack = cluster.run(coworker, ["sh", "-c", f"cat {nans} >> {event}"])
    assert attack.returncode == 0, attack.stderr  # his write works
    answer = _monitor(cluster, "--tb", str(event.parent), umask="022")
    assert answer["decision"] == "WAIT" and answer["reason"] == "source_writable_by_others", answer
    assert f"writable by the group {cluster.group} through its ACL" in answer["message"], answer["message"]



def test_healthy_records_he_appends_after_her_nan_never_make_her_run_look_healthy(shared_cluster: SharedCluster) -> None:
    """The held class: her run went NaN; he appends healthy-looking records after it to mask it. The newest points
    are his to write, so they are not evidence of health: a named WAIT on the file, never CONTINUE healthy."""
    cluster = shared_cluster
    broken = _events(cluster, "mask-broken", [2.0 / s + 0.1 for s in range(1, 150)] + [float("nan")] * 5)
    mask = _events(cluster, "mask-healthy", [0.11 - s * 1e-5 for s in range(100)], first=155)
    event = cluster.project / "mask" / "runs" / "a" / broken.name
    _copy_as(cluster, cluster.victim, broken, event, umask="002")  # 0664 in the 2775 project
    attack = cluster.run(cluster.coworker, ["sh", "-c", f"cat {mask} >> {event}"])
    assert attack.returncode == 0, attack.stderr
    answer = _monitor(cluster, "--tb", str(event.parent))
    assert answer["decision"] != "CONTINUE", answer
    assert answer["reason"] == "source_writable_by_others", answer
    assert str(event) in answer["message"] or event.name in answer["message"], answer["message"]


# ---- never follow ----

_PNG = """
import sys
from pathlib import Path
from guarded_sbatch.actions.evidence import plot_in_subprocess
from guarded_sbatch.judge.verdict import Decision, Reason, Verdict
try:
    plot_in_subprocess(Path(sys.argv[1]), Path(sys.argv[2]), {"train/loss": ([1, 2, 3], [3.0, 2.0, 1.0])},
                       Verdict(Decision.CONTINUE, Reason.HEALTHY, ""))
    print("written")
except RuntimeError as exc:
    print(exc)
"""


def test_a_link_planted_at_the_png_path_is_refused_never_written_through(shared_cluster: SharedCluster) -> None:
    cluster = shared_cluster
    victim = cluster.victim
    precious = victim.home / "thesis.tex"
    _sh(cluster, victim, f"echo chapter one > {precious} && chmod 644 {precious}")
    out = cluster.project / "door-png"
    _sh(cluster, victim, f"mkdir -p {out}/tmp && chmod 700 {out}/tmp")
    _sh(cluster, cluster.coworker, f"ln -s {precious} {out}/stopped.png")
    shown = _py(cluster, victim, _PNG, str(out / "tmp"), str(out / "stopped.png")).stdout
    assert "symbolic link" in shown and "refused" in shown, shown
    assert precious.read_text() == "chapter one\n" and oct(precious.stat().st_mode & 0o777) == "0o644"
    assert _py(cluster, victim, _PNG, str(out / "tmp"), str(out / "mine.png")).stdout.strip() == "written"


# ---- the reference is fixed when chosen ----

def test_her_reference_rewritten_in_place_never_turns_the_block_into_a_pass(shared_cluster: SharedCluster) -> None:
    """Her reference is her finished run's config as it was launched, kept in her private state folder: his rewrite
    of the shared config file it came from changes nothing."""
    cluster = shared_cluster
    project = cluster.copy_project(EXAMPLE, "door-reference")
    record_baseline_as(cluster, cluster.victim, project)
    code, report = _check(cluster, project, "train.sh", "--batch-size", "256")
    diff = _config_diff(report)
    assert code == 3 and BLOCK in diff and "reference sha256: " in diff, report
    assert "can be written by others" not in diff  # her snapshot is hers alone
    reference = next(project.rglob("synthetic-tanh-mlp-baseline/config.yaml"))
    values = yaml.safe_load(reference.read_text())
    _sh(cluster, cluster.coworker, f"cat > {reference} <<'EOF'\n{yaml.safe_dump({**values, 'batch_size': 256})}EOF")
    assert reference.stat().st_uid == cluster.victim.uid  # owner (and inode) stay hers
    code, again = _check(cluster, project, "train.sh", "--batch-size", "256")
    assert code == 3 and BLOCK in _config_diff(again), again
    assert "[ok]" not in _config_diff(again).splitlines()[0]


# ---- low: planted slurm-<N>.out files ----

def test_planted_outputs_for_her_next_job_ids_refuse_without_saying_a_job_runs(shared_cluster: SharedCluster) -> None:
    cluster = shared_cluster
    project = cluster.copy_project(EXAMPLE, "door-ids")
    peek = ("from guarded_sbatch.core.fsutil import state_dir\nfrom guarded_sbatch.scheduler.local_ids import "
            "peek_next_id\nprint(peek_next_id(state_dir() / 'local-jobs'))")
    first = int(_py(cluster, cluster.victim, peek).stdout)
    _sh(cluster, cluster.coworker, f"cd {project} && for n in $(seq {first} {first + 300}); do : > slurm-$n.out; done")
    result = cluster.run(cluster.victim, [str(cluster.python), "-P", "-m", "guarded_sbatch", "train.sh"], cwd=project,
                         env=cluster.env(cluster.victim, GUARDED_SBATCH_BACKEND="local"), timeout=120)
    assert result.returncode != 0 and "would write over an existing file" in result.stderr, result.stderr
    assert "nothing was submitted" in result.stderr and "runs unguarded" not in result.stderr, result.stderr


# ---- low: colour sequences in a co-worker's TensorBoard tag ----

def test_a_colour_sequence_in_a_tag_is_shown_never_obeyed_by_show() -> None:
    from guarded_sbatch.cli import show
    from guarded_sbatch.core.sanitize import visible_keeping_colours

    tag = "\x1b[32mall runs healthy\x1b[0m/loss"
    series = {tag: ([1, 2], [1.0, 0.5])}
    shown = {show.visible_line(key): value for key, value in series.items()}  # what gather() does with keys
    printed = visible_keeping_colours(next(iter(shown)))  # the CLI's output filter keeps its own colour codes
    assert "\x1b" not in printed and "\\x1b[32mall runs healthy" in printed
