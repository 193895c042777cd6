"""scripts/dev-slurm: status reflects health, up is an idempotent no-op when healthy, site plugins hook in."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from guarded_sbatch.core.errors import SchedulerError
from guarded_sbatch.core.runner import CommandResult, run_command
from guarded_sbatch.scheduler.interface import SubmitRequest
from guarded_sbatch.scheduler.slurm import SlurmScheduler

pytestmark = [pytest.mark.slurm, pytest.mark.serial]

REPO = Path(__file__).resolve().parents[1]
DEV_SLURM = REPO / "scripts" / "dev-slurm"
STATE_DIR = Path(os.environ.get("DEV_SLURM_STATE_DIR", "/var/lib/guarded-sbatch-dev-slurm"))
CONF_DIR = Path(os.environ.get("DEV_SLURM_CONF_DIR", "/etc/slurm"))
REJECTING_JOB_SUBMIT_LUA = """
function slurm_job_submit(job_desc, part_list, submit_uid)
  if job_desc.comment == "dev-slurm-reject-me" then
    slurm.log_user("dev-slurm test plugin: this job is refused")
    return slurm.ERROR
  end
  return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  return slurm.SUCCESS
end
"""


def dev_slurm(*args: str, env: dict[str, str] | None = None) -> CommandResult:
    return run_command([str(DEV_SLURM), *args], timeout=240, check=False, env=env)


def daemon_pids(status_text: str) -> dict[str, str]:
    return dict(re.findall(r"^([\w-]+): running \(pid (\d+)", status_text, flags=re.MULTILINE))


def test_status_is_zero_and_names_mode_and_nodes_when_healthy(slurm_cluster: None) -> None:
    status = dev_slurm("status")
    assert status.returncode == 0, status.stdout + status.stderr
    assert "mode: accounting" in status.stdout
    assert "usable: yes" in status.stdout
    daemons = set(daemon_pids(status.stdout))
    assert {"munged", "mariadb", "slurmdbd", "slurmctld"} <= daemons
    if "topology: multi" in status.stdout:  # every node: its own slurmd, state, address and namespace
        usable = "(?:idle|mixed|allocated|completing)"  # others' jobs may run there
        nodes = re.findall(rf"^node (\S+): {usable} .* address (\S+) namespace (\S+)$", status.stdout, flags=re.MULTILINE)
        assert len(nodes) >= 3 and all(name == namespace for name, _, namespace in nodes), status.stdout
        assert daemons - {"munged", "mariadb", "slurmdbd", "slurmctld"} == {f"slurmd-{name}" for name, _, _ in nodes}
        assert len({address for _, address, _ in nodes}) == len(nodes)
    else:
        assert "slurmd" in daemons


def test_up_again_finds_nothing_to_do_and_restarts_nothing(slurm_cluster: None) -> None:
    # a test before this one on the same cluster may have left its own settings (extra lines, a plugin, accounting
    # off): the first `up` puts back the defaults, the second must find nothing to do and restart nothing
    settled = dev_slurm("up")
    assert settled.returncode == 0, settled.stderr
    before = daemon_pids(dev_slurm("status").stdout)
    again = dev_slurm("up")
    assert again.returncode == 0, again.stderr
    assert "nothing to do" in again.stderr
    assert daemon_pids(dev_slurm("status").stdout) == before


def test_status_is_nonzero_while_slurmctld_is_down(slurm_cluster: None) -> None:
    try:
        assert dev_slurm("stop-ctld").returncode == 0
        down = dev_slurm("status")
        assert down.returncode != 0
        assert "slurmctld: stopped" in down.stdout and "usable: no" in down.stdout
    finally:
        restarted = dev_slurm("start-ctld")
    assert restarted.returncode == 0, restarted.stderr
    assert dev_slurm("status").returncode == 0


@pytest.fixture
def restore_site_plugins() -> Iterator[None]:
    """Put back whatever extra slurm.conf lines and job_submit.lua were there before (others may use them)."""
    saved_extra = STATE_DIR / "extra.conf"
    previous_extra = saved_extra.read_text() if saved_extra.is_file() else None
    lua = CONF_DIR / "job_submit.lua"
    previous_lua = lua.read_text() if lua.is_file() else None
    yield
    env = dict(os.environ)
    backup_dir = STATE_DIR / "test-restore"
    backup_dir.mkdir(parents=True, exist_ok=True)
    if previous_extra is None:
        env["DEV_SLURM_EXTRA_CONF"] = ""
    else:
        (backup_dir / "extra.conf").write_text(previous_extra)
        env["DEV_SLURM_EXTRA_CONF"] = str(backup_dir / "extra.conf")
    if previous_lua is None:
        lua.unlink(missing_ok=True)
    else:
        lua.write_text(previous_lua)
    restored = dev_slurm("up", env=env)
    shutil.rmtree(backup_dir, ignore_errors=True)
    assert restored.returncode == 0, restored.stderr


def test_extra_conf_and_lua_dir_install_a_job_submit_plugin(
    slurm_cluster: None, tmp_path: Path, restore_site_plugins: None
) -> None:
    lua_dir = tmp_path / "lua"
    lua_dir.mkdir()
    (lua_dir / "job_submit.lua").write_text(REJECTING_JOB_SUBMIT_LUA)
    extra = tmp_path / "extra.conf"
    extra.write_text("JobSubmitPlugins=lua\n")
    env = {**os.environ, "DEV_SLURM_EXTRA_CONF": str(extra), "DEV_SLURM_LUA_DIR": str(lua_dir)}
    up = dev_slurm("up", env=env)
    assert up.returncode == 0, up.stderr
    assert "JobSubmitPlugins=lua" in (CONF_DIR / "slurm.conf").read_text()

    slurm = SlurmScheduler(state_dir=tmp_path / "state")
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\ntrue\n")
    with pytest.raises(SchedulerError, match="this job is refused"):
        slurm.submit(SubmitRequest(script=script, sbatch_options=("--comment=dev-slurm-reject-me",), workdir=tmp_path))
    accepted = slurm.submit(SubmitRequest(script=script, sbatch_options=("--output=/dev/null",), workdir=tmp_path))
    assert accepted.isdigit()

    # A later `up` without the variables keeps the plugin lines (they are remembered).
    assert dev_slurm("up").returncode == 0
    assert "JobSubmitPlugins=lua" in (CONF_DIR / "slurm.conf").read_text()


SIDE_BY_SIDE = {  # a second, small cluster next to the shared one: its own everything but munge and slurmdbd
    "DEV_SLURM_STATE_DIR": "/var/lib/guarded-sbatch-dev-slurm-test",
    "DEV_SLURM_CONF_DIR": "/var/lib/guarded-sbatch-dev-slurm-test/etc",
    "DEV_SLURM_CLUSTER": "devtest", "DEV_SLURM_CTLD_PORT": "7017", "DEV_SLURM_SUBNET": "10.251.79",
    "DEV_SLURM_NODE_PREFIX": "tnode", "DEV_SLURM_COMPUTE_NODES": "2", "DEV_SLURM_SERVICE_NODES": "1",
}


def link_names() -> set[str]:
    lines = run_command(["ip", "-o", "link"], timeout=30).stdout.splitlines()
    return {line.split(": ")[1].split("@")[0] for line in lines if ": " in line}


def test_a_side_by_side_multinode_cluster_runs_across_nodes_and_down_removes_all_it_made(slurm_cluster: None) -> None:
    env = {**os.environ, **SIDE_BY_SIDE, "SLURM_CONF": SIDE_BY_SIDE["DEV_SLURM_CONF_DIR"] + "/slurm.conf"}
    nodes = ["tnode1", "tnode2", "tnode3"]
    links_before = link_names()
    try:
        up = dev_slurm("up", env=env)
        assert up.returncode == 0, up.stderr
        assert "nothing to do" in dev_slurm("up", env=env).stderr  # idempotent
        status = dev_slurm("status", env=env)
        assert status.returncode == 0, status.stdout
        for i, node in enumerate(nodes, start=1):
            assert f"node {node}: idle" in status.stdout and f"address 10.251.79.{10 + i} namespace {node}" in status.stdout
        hosts = Path("/etc/hosts").read_text()
        assert all(f"10.251.79.{10 + i} {node}" in hosts for i, node in enumerate(nodes, start=1))
        # one task on each of two nodes: two hostnames, two addresses, through the cluster's own slurmctld
        ran = run_command(["srun", "-N2", "-n2", "--ntasks-per-node=1", "-p", "compute", "sh", "-c",
                           "echo $(hostname) $(ip -o -4 addr show eth0 | awk '{print $4}')"], timeout=60, env=env)
        assert sorted(ran.stdout.split()) == sorted(["tnode1", "10.251.79.11/24", "tnode2", "10.251.79.12/24"]), ran.stdout
        shell = dev_slurm("shell", "tnode3", "hostname", env=env)
        assert shell.stdout.strip() == "tnode3", shell.stderr
        # what a `down` interrupted halfway leaves (or the kernel's asynchronous teardown of a namespace while
        # `down` runs): one node's namespace and links already gone; `down` must still finish the rest
        run_command(["ip", "netns", "del", "tnode3"], timeout=30)
    finally:
        down = dev_slurm("down", env=env)
    assert down.returncode == 0, down.stderr
    assert not any(Path("/run/netns", node).exists() for node in nodes)
    assert link_names() == links_before
    assert "tnode" not in Path("/etc/hosts").read_text()
    assert dev_slurm("status").returncode == 0  # the shared cluster never noticed
