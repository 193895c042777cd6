"""Enforcement fails closed, seen from a user's side: the rendered policy is readable by users (cli_filter runs in
the user's sbatch, as the user) and a policy they cannot read or that is broken rejects instead of weakening to
`tag`; the audit trail names the uid's user whatever $LOGNAME says, and many users append to it without reading
or editing each other's lines (per-user files in a sticky folder; or one file nobody but its owner reads)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

from conftest import require
from shared_cluster import REPO, SharedCluster, User, shared_cluster_fixture  # noqa: F401 - the fixture

PLUGINS = REPO / "wrapper" / "guarded_sbatch" / "site" / "lua"
LOAD = ('local lib = dofile(arg[1] .. "/guarded_sbatch_lib.lua")\nlocal policy, problem = lib.load_policy(arg[1])\n'
        'io.write(policy.unguarded_training, "|", lib.reject_message("line 2: python train.py", policy), "|", '
        'tostring(problem))\n')


def _policy_dir(cluster: SharedCluster, name: str, mode: str) -> Path:
    folder = cluster.base / name
    folder.mkdir()
    folder.chmod(0o755)
    shutil.copy(PLUGINS / "guarded_sbatch_lib.lua", folder)
    (folder / "guarded_sbatch_lib.lua").chmod(0o644)
    site = cluster.base / f"{name}-site.toml"
    site.write_text(f'[enforcement]\nunguarded_training = "{mode}"\n')
    rendered = subprocess.run(["sh", "-c", 'umask 077 && exec "$@"', "sh", sys.executable, "-P", "-m", "guarded_sbatch",
                               "admin", "render-policy", str(site), str(folder / "guarded_sbatch_policy.lua")],
                              capture_output=True, text=True, timeout=60, cwd="/",
                              env={**os.environ, "PYTHONPATH": str(REPO / "wrapper")})
    assert rendered.returncode == 0, rendered.stderr
    return folder


def _load_as(cluster: SharedCluster, user: User, folder: Path) -> list[str]:
    lua = shutil.which("lua5.3") or shutil.which("lua")
    require(lua is not None, "needs a Lua interpreter (apt-get install lua5.3)")
    script = cluster.base / "load.lua"
    script.write_text(LOAD)
    script.chmod(0o644)
    result = cluster.run(user, [str(lua), str(script), str(folder)], cwd=cluster.base)
    assert result.returncode == 0, result.stderr
    return result.stdout.split("|")


def test_the_rendered_policy_is_readable_by_users_and_a_policy_they_cannot_read_rejects(shared_cluster: SharedCluster) -> None:
    cluster = shared_cluster
    strict = _policy_dir(cluster, "policy-reject", "reject")
    assert stat.S_IMODE((strict / "guarded_sbatch_policy.lua").stat().st_mode) == 0o644  # whatever the admin's umask
    mode, message, problem = _load_as(cluster, cluster.victim, strict)
    assert (mode, problem) == ("reject", "nil")
    assert "could not be loaded" not in message

    lenient = _policy_dir(cluster, "policy-tag", "tag")
    assert _load_as(cluster, cluster.victim, lenient)[0] == "tag"  # the site's own mode, read by the user
    (lenient / "guarded_sbatch_policy.lua").chmod(0o600)  # e.g. an admin's copy with a private umask
    mode, message, problem = _load_as(cluster, cluster.victim, lenient)
    assert mode == "reject" and "Permission denied" in problem  # fails closed, never silently `tag`
    assert "could not be loaded" in message and "tell your site admin" in message

    (lenient / "guarded_sbatch_policy.lua").write_text("return { unguarded_training = ")  # broken
    (lenient / "guarded_sbatch_policy.lua").chmod(0o644)
    assert _load_as(cluster, cluster.victim, lenient)[0] == "reject"


RECORD = ("import sys\nfrom pathlib import Path\nfrom guarded_sbatch.records.audit import AuditLog\n"
          "problem = AuditLog(Path(sys.argv[1])).record('waiver', job='7', run='r', check='eta', reason=sys.argv[2])\n"
          "print(problem or 'ok')\n")


def _record_as(cluster: SharedCluster, user: User, log: Path, reason: str) -> str:
    env = cluster.env(user, LOGNAME="root", USER="root")  # a lie the audit must not repeat
    result = cluster.run(user, [str(cluster.python), "-P", "-c", RECORD, str(log), reason], cwd=user.home, env=env,
                         umask="077")
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_per_user_audit_files_in_a_sticky_folder(shared_cluster: SharedCluster) -> None:
    cluster = shared_cluster
    folder = cluster.base / "audit"
    folder.mkdir()
    folder.chmod(0o1733)  # root's, sticky, writable by all, listable by none: what the README tells admins
    assert _record_as(cluster, cluster.coworker, folder, "coworker waives") == "ok"
    # the co-worker plants the victim's file name first, hoping to read or edit the victim's lines
    cluster.write_as(cluster.coworker, folder / f"{cluster.victim.name}.jsonl", "", mode="666")
    refused = _record_as(cluster, cluster.victim, folder, "victim waives")
    assert f"belongs to uid {cluster.coworker.uid}, not you" in refused
    assert (folder / f"{cluster.victim.name}.jsonl").read_text() == ""
    (folder / f"{cluster.victim.name}.jsonl").unlink()  # the admin removes the planted file
    assert _record_as(cluster, cluster.victim, folder, "victim waives") == "ok"
    victim_file = folder / f"{cluster.victim.name}.jsonl"
    assert stat.S_IMODE(victim_file.stat().st_mode) == 0o600 and victim_file.stat().st_uid == cluster.victim.uid
    assert json.loads(victim_file.read_text())["user"] == cluster.victim.name  # from the uid, not $LOGNAME=root
    peek = cluster.run(cluster.coworker, ["cat", str(victim_file)])
    assert peek.returncode != 0 and "Permission denied" in peek.stderr
    edit = cluster.run(cluster.coworker, ["sh", "-c", f": > {victim_file}"])
    assert edit.returncode != 0
    assert json.loads(victim_file.read_text())["reason"] == "victim waives"


def test_one_shared_audit_file_keeps_every_users_lines_and_shows_none(shared_cluster: SharedCluster) -> None:
    cluster = shared_cluster
    folder = cluster.base / "audit-one"
    folder.mkdir()
    folder.chmod(0o1777)
    log = folder / "audit.jsonl"
    assert _record_as(cluster, cluster.victim, log, "first writer") == "ok"  # creates it, umask 077
    assert stat.S_IMODE(log.stat().st_mode) == 0o622
    assert _record_as(cluster, cluster.coworker, log, "second writer") == "ok"  # not dropped
    users = [json.loads(line)["user"] for line in log.read_text().splitlines()]
    assert users == [cluster.victim.name, cluster.coworker.name]
    assert cluster.run(cluster.coworker, ["cat", str(log)]).returncode != 0
