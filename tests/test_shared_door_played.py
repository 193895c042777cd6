"""Round 4 of the shared cluster, the classes played end to end by the co-worker (two real Unix users in one group, a
setgid 2775 project folder, umask 002, the local backend):

- data that prints itself into the log: her trainer prints one sample of a text dataset he maintains in the shared
  folder, `{'loss': nan, 'grad_norm': nan, 'step': 1000000}`, into her own log (umask 022, a folder only she writes);
  the healthy run completes with CONTINUE and the fake step never becomes the run's step;
- colour sequences in a co-worker's TensorBoard tag: he drops an event file whose tag is
  `ESC[32mall runs healthy ESC[0m` into her run's group-writable folder; `show` and `status` show the escape, never
  obey it (captured, and on a terminal where the CLI colours its own output);
- the default-ACL variants (her folder 0755 by its mode bits, a default ACL giving his group write, umask 022) of the
  deletion, configuration, template, reference, `--png` and planted `slurm-<N>.out` classes: what the mode bits hide
  is weighed as his, and each attack fails as it does in the 2775 folder (tests/test_shared_door.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from e2e_helpers import EXAMPLE, EXAMPLE_NAME
from finished_runs import record_baseline_as
from shared_cluster import SharedCluster, User, shared_cluster_fixture  # noqa: F401 - the fixture
from source_writers import tb_event, write_tb_events
from test_shared_door import _DELETE, _PLAN, _PNG, _py, _sh
from test_shared_reference import BLOCK, _check, _config_diff

COLOUR_TAG = "\x1b[32mall runs healthy\x1b[0m"
SAMPLE = "{'loss': nan, 'grad_norm': nan, 'step': 1000000}"
STEPS = 150  # 18 s after the sample: past the 10 s a non-finite newest point is given before a STOP
needs_setfacl = pytest.mark.skipif(shutil.which("setfacl") is None,
                                   reason="needs setfacl (Debian's acl; scripts/lib/venv.sh)")

# Her trainer: its own log line every step; at step 30 it prints one sample of his dataset, as trainers do to show
# what they read. Nothing about it is unusual but that the sample's text looks like a training line.
TRAINER = """import sys, time
from pathlib import Path
steps, data, log = int(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
log.parent.mkdir(parents=True, exist_ok=True)
with log.open("a", buffering=1) as out:
    for step in range(1, steps + 1):
        print(f"step {step} | loss {2.0 / step + 0.1:.4f} | lr 0.0500", file=out)
        if step == 30:
            print(data.read_text().splitlines()[1], file=out)
        time.sleep(0.15)
"""


def _cli(cluster: SharedCluster, user: User, *args: str, cwd: Path, umask: str = "002",
         env: dict[str, str] | None = None, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return cluster.run(user, [str(cluster.python), "-P", "-m", "guarded_sbatch", *args], cwd=cwd, umask=umask,
                       env=cluster.env(user, GUARDED_SBATCH_BACKEND="local", OPENBLAS_NUM_THREADS="1", **(env or {})),
                       timeout=timeout)


def _job_id(launched: subprocess.CompletedProcess[str]) -> str:
    out = launched.stdout + launched.stderr
    assert launched.returncode == 0 and "Submitted batch job " in out, out
    return out.split("Submitted batch job ", 1)[1].split()[0]


def _record(cluster: SharedCluster, job_id: str, timeout: float = 60) -> dict:
    runs = cluster.victim.home / ".local" / "state" / "guarded-sbatch" / "runs"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for path in runs.glob("*/run.json"):
            record = json.loads(path.read_text())
            if record.get("job_id") == job_id:
                return record
        time.sleep(0.2)
    raise AssertionError(f"no run recorded for job {job_id}")


def _wait_ended(cluster: SharedCluster, record: dict, timeout: float = 180) -> str:
    """Waits for the run's sidecar job to end; returns its output."""
    state = cluster.victim.home / ".local" / "state" / "guarded-sbatch"
    sidecar = state / "local-jobs" / str(record.get("sidecar_id", "none")) / "job.json"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sidecar.is_file() and json.loads(sidecar.read_text()).get("state") in ("COMPLETED", "FAILED", "CANCELLED"):
            break
        time.sleep(0.5)
    else:
        raise AssertionError(f"the sidecar of job {record['job_id']} did not end in time")
    folder = state / "runs" / record["run_id"]
    return "".join(p.read_text(errors="replace") for p in sorted(folder.glob("sidecar-*.out")))


def _status_row(cluster: SharedCluster, job_id: str, cwd: Path) -> dict:
    status = _cli(cluster, cluster.victim, "status", "--json", cwd=cwd)
    assert status.returncode == 0, status.stderr
    rows = json.loads(status.stdout)
    rows = rows.get("runs", rows) if isinstance(rows, dict) else rows
    return next(r for r in rows if str(r.get("job_id")) == job_id)


# ---- data that prints itself into the log ----

@pytest.mark.waits
def test_his_dataset_sample_printed_into_her_log_neither_stops_her_run_nor_moves_its_step(
        shared_cluster: SharedCluster) -> None:
    cluster = shared_cluster
    victim, coworker = cluster.victim, cluster.coworker
    data = cluster.project / "played-data" / "samples.txt"  # his, in the shared 2775 folder: 0664
    cluster.write_as(coworker, data, f"the quick brown fox\n{SAMPLE}\njumps over the lazy dog\n")
    work = victim.home / "played-log"  # hers alone, written under umask 022
    name = f"played-textlog-{int(time.time()) % 100000}"
    script = (f"#!/bin/bash\n#SBATCH --job-name={name}\n#SBATCH --ntasks=1\n#SBATCH --cpus-per-task=1\n"
              f"#SBATCH --mem=400M\n#SBATCH --time=00:10:00\nset -euo pipefail\ncd \"${{SLURM_SUBMIT_DIR:-.}}\"\n"
              f"python trainer.py {STEPS} {data} logs/train.log\n")
    cluster.write_as(victim, work / "train.sh", script, mode="644")
    cluster.write_as(victim, work / "trainer.py", TRAINER, mode="644")
    cluster.fast_sidecar(victim)

    launched = _cli(cluster, victim, "--guard-log", "logs/train.log", "train.sh", cwd=work, umask="022")
    job_id = _job_id(launched)
    record = _record(cluster, job_id)
    output = _wait_ended(cluster, record)
    log = (work / "logs" / "train.log").read_text()
    assert SAMPLE in log and f"step {STEPS} |" in log  # the sample was printed, the run went to its end
    assert oct((work / "logs" / "train.log").stat().st_mode & 0o777) == "0o644"  # her own log, hers alone

    assert f"training job {job_id} ended COMPLETED" in output and "final decision CONTINUE" in output, output[-3000:]
    assert "Decision: STOP" not in output and "non_finite" not in output, output[-3000:]
    assert "1000000" not in output.replace(SAMPLE, ""), output[-3000:]  # never the run's step
    row = _status_row(cluster, job_id, work)
    assert row["state"] == "COMPLETED" and row["decision"] == "CONTINUE", row
    assert row.get("stopped_by") in (None, "-", ""), row
    assert int(row["last_step"]) == STEPS, row  # the trainer's own last step, not the sample's


# ---- colour sequences in a co-worker's TensorBoard tag ----

def _his_records(cluster: SharedCluster, event_file: Path) -> None:
    """Records tensorboard's writer makes, tagged with colour sequences, appended by him to her event file."""
    made = cluster.base / "made" / "colour-tag"
    his = write_tb_events(made, [tb_event(s, f"eval/{COLOUR_TAG}/loss", 1.0 / s, wall_time=time.time())
                                 for s in range(10, 45, 10)])
    for path in (made.parent, made):
        os.chmod(path, 0o755)
    his.chmod(0o644)
    appended = cluster.run(cluster.coworker, ["sh", "-c", f"cat {his} >> {event_file}"])
    assert appended.returncode == 0, appended.stderr  # her file: 0664 under umask 002 in the 2775 folder


def _assert_shown_not_obeyed(output: str, *, terminal: bool) -> None:
    assert "Traceback" not in output, output[-3000:]
    assert "\x1b[32mall runs healthy" not in output and "all runs healthy\x1b[0m" not in output, output[-3000:]
    if not terminal:
        assert "\x1b" not in output, output[-3000:]  # a pipe: the CLI colours nothing, so every ESC would be his


@pytest.mark.waits
def test_a_colour_sequence_in_his_tag_reaches_her_show_and_status_visibly_never_raw(
        shared_cluster: SharedCluster) -> None:
    cluster = shared_cluster
    victim = cluster.victim
    project = cluster.copy_project(EXAMPLE, "played-colour")
    name = f"{EXAMPLE_NAME}-c{int(time.time()) % 100000}"
    script = project / "train.sh"
    script.write_text(script.read_text().replace(f"--job-name={EXAMPLE_NAME}\n", f"--job-name={name}\n", 1))
    cluster.fast_sidecar(victim)

    # a short run: no eval yet, so his eval tag is the one `show` draws beside her train loss
    launched = _cli(cluster, victim, "train.sh", "--steps", "45", "--step-seconds", "0.1", cwd=project)
    job_id = _job_id(launched)
    _wait_ended(cluster, _record(cluster, job_id))
    events = sorted(project.glob("runs/**/events.out.tfevents.*"))
    assert len(events) == 1, events
    _his_records(cluster, events[0])

    for args in (("show", job_id), ("show", "--plain", job_id), ("status",)):
        shown = _cli(cluster, victim, *args, cwd=project)
        assert shown.returncode == 0, shown.stderr
        _assert_shown_not_obeyed(shown.stdout + shown.stderr, terminal=False)
    shown = _cli(cluster, victim, "show", "--plain", job_id, cwd=project).stdout
    assert "\\x1b[32mall runs healthy\\x1b[0m" in shown, shown[-3000:]  # seen, as text

    # on a terminal the CLI colours its own output; his sequence is still shown as text
    for args in (f"show {job_id}", "status"):
        command = f"{cluster.python} -P -m guarded_sbatch {args}"
        on_tty = cluster.run(victim, ["script", "-qec", command, "/dev/null"], cwd=project,
                             env=cluster.env(victim, GUARDED_SBATCH_BACKEND="local", COLUMNS="200", TERM="xterm"))
        assert on_tty.returncode == 0, on_tty.stdout[-2000:]
        _assert_shown_not_obeyed(on_tty.stdout + on_tty.stderr, terminal=True)
    assert "\\x1b[32mall runs healthy" in on_tty.stdout or "all runs healthy" not in on_tty.stdout


# ---- writers mode bits do not show: the other classes in a folder with default ACLs ----

def _acl_folder(cluster: SharedCluster, folder: Path) -> None:
    """Her folder, 0755 by its mode bits, whose default ACL gives the project group write to all made in it."""
    folder.mkdir(parents=True)
    os.chown(folder, cluster.victim.uid, cluster.victim.gid)
    os.chmod(folder, 0o755)
    done = cluster.run(cluster.victim, ["setfacl", "-m", f"g:{cluster.group}:rwx", "-d", "-m",
                                        f"g:{cluster.group}:rwx", str(folder)], umask="022")
    assert done.returncode == 0, done.stderr


@needs_setfacl
def test_a_config_his_group_can_write_through_a_default_acl_is_refused(shared_cluster: SharedCluster) -> None:
    cluster = shared_cluster
    victim = cluster.victim
    folder = cluster.base / "played-acl-config"
    _acl_folder(cluster, folder)
    config = folder / "config.toml"
    cluster.write_as(victim, config, '[sidecar]\nmem = "400M"\n', mode="644")  # 0644 by its bits; the ACL says more
    load = "from guarded_sbatch.core.config import load_config\nload_config()\nprint('loaded')\n"
    result = cluster.run(victim, [str(cluster.python), "-P", "-c", load], cwd=cluster.base, umask="022",
                         env=cluster.env(victim, GUARDED_SBATCH_USER_CONFIG=str(config)))
    assert result.returncode != 0 and f"config {config} refused" in result.stderr, result
    assert cluster.group in result.stderr and "ACL" in result.stderr, result.stderr


@needs_setfacl
def test_her_reference_his_group_can_write_through_a_default_acl_is_never_a_pass(
        shared_cluster: SharedCluster) -> None:
    """The config her finished run came from lies where his group can write through a default ACL: her reference is
    that run's config as launched (her private state folder), so his rewrite of the file changes nothing."""
    cluster = shared_cluster
    project = _acl_project(cluster, cluster.base / "played-acl-reference")
    record_baseline_as(cluster, cluster.victim, project)
    code, report = _check(cluster, project, "train.sh", "--batch-size", "256")
    assert code == 3 and BLOCK in _config_diff(report), report
    reference = next(project.rglob("synthetic-tanh-mlp-baseline/config.yaml"))
    assert reference.stat().st_mode & 0o002 == 0  # nobody but the group (through the ACL) can write it
    assert cluster.group in subprocess.run(["getfacl", "-p", str(reference)], capture_output=True, text=True,
                                           timeout=30).stdout
    text = reference.read_text()
    rewritten = "\n".join("batch_size: 256" if line.startswith("batch_size:") else line for line in text.splitlines())
    written = cluster.run(cluster.coworker, ["sh", "-c", f"cat > {reference}"], input_text=rewritten + "\n")
    assert written.returncode == 0, written.stderr  # the ACL gives him the write the mode bits hide
    assert reference.stat().st_uid == cluster.victim.uid
    code, report = _check(cluster, project, "train.sh", "--batch-size", "256")
    diff = _config_diff(report)
    assert code == 3 and BLOCK in diff, report
    assert "[ok]" not in diff.splitlines()[0]


def _acl_project(cluster: SharedCluster, folder: Path) -> Path:
    """Her copy of the example in an ACL folder, each file made as a program makes it (open(2) asks for 0666; cp
    would ask for the source's 0644 and so set the ACL's mask to read-only): the default ACL gives his group the
    write its mode bits hide."""
    _acl_folder(cluster, folder)
    project = folder / "project"
    copy = ('cd "$1" && find . -type d | while read -r d; do mkdir -p "$2/$d"; done && '
            'find . -type f ! -name "events.out.tfevents.*" | while read -r f; do cat "$f" > "$2/$f"; done')
    copied = cluster.run(cluster.victim, ["sh", "-c", copy, "sh", str(EXAMPLE), str(project)], umask="022")
    assert copied.returncode == 0, copied.stderr
    return project


@needs_setfacl
def test_a_parent_he_swaps_in_her_acl_folder_is_never_deleted_through(shared_cluster: SharedCluster) -> None:
    cluster = shared_cluster
    victim, coworker = cluster.victim, cluster.coworker
    folder = cluster.base / "played-acl-delete"
    _acl_folder(cluster, folder)
    shared = folder / "runs"
    _sh(cluster, victim, f"mkdir -p {shared}/ckpt && echo shared > {shared}/ckpt/w.bin", umask="022")
    _sh(cluster, victim, f"mkdir -p {victim.home}/runs/ckpt && echo precious > {victim.home}/runs/ckpt/w.bin")
    target, root = f"{shared}/ckpt", str(shared)
    planned = json.loads(_py(cluster, victim, _PLAN, target, root, umask="022").stdout)
    assert "identities" in planned, planned
    # her folder's mode bits say 0755; the ACL lets him rename what is in it
    _sh(cluster, coworker, f"mv {shared} {shared}.old && ln -s {victim.home}/runs {shared}")
    done = _py(cluster, victim, _DELETE, json.dumps(planned), umask="022")
    assert done.stdout.startswith("REFUSED") and "not deleted" in done.stdout, done
    assert (victim.home / "runs" / "ckpt" / "w.bin").read_text() == "precious\n"
    replanned = json.loads(_py(cluster, victim, _PLAN, target, root, umask="022").stdout)
    assert "refused" in replanned and f"made by {coworker.name}" in replanned["refused"], replanned
    assert (folder / "runs.old" / "ckpt" / "w.bin").read_text() == "shared\n"


@needs_setfacl
def test_an_admin_template_his_group_can_write_through_a_default_acl_is_refused(shared_cluster: SharedCluster) -> None:
    cluster = shared_cluster
    templates = cluster.base / "played-acl-templates"  # root's, 0755 by its mode bits: an admin's template folder
    templates.mkdir()
    os.chmod(templates, 0o755)
    subprocess.run(["setfacl", "-m", f"g:{cluster.group}:rwx", "-d", "-m", f"g:{cluster.group}:rwx", str(templates)],
                   check=True, timeout=30)
    (templates / "sidecar.sbatch").write_text("#!/bin/bash\necho the admin's line\n")  # open(2) asks for 0666
    appended = cluster.run(cluster.coworker, ["sh", "-c", f"echo his line >> {templates}/sidecar.sbatch"])
    assert appended.returncode == 0, appended.stderr  # the ACL gives him the write the mode bits hide
    code = ("import sys\nfrom pathlib import Path\nfrom guarded_sbatch.core.errors import UsageError\n"
            "from guarded_sbatch.launch.templates import load_template\ntry:\n"
            "    load_template('sidecar.sbatch', [Path(sys.argv[1])])\n    print('loaded')\n"
            "except UsageError as exc:\n    print(exc)\n")
    shown = _py(cluster, cluster.victim, code, str(templates), umask="022").stdout
    assert f"template {templates}/sidecar.sbatch refused" in shown and cluster.group in shown, shown


@needs_setfacl
def test_a_link_he_plants_at_the_png_path_in_her_acl_folder_is_refused(shared_cluster: SharedCluster) -> None:
    cluster = shared_cluster
    victim = cluster.victim
    precious = victim.home / "thesis-acl.tex"
    _sh(cluster, victim, f"echo chapter one > {precious} && chmod 644 {precious}")
    out = cluster.base / "played-acl-png"
    _acl_folder(cluster, out)
    _sh(cluster, victim, f"mkdir -p {out}/tmp && chmod 700 {out}/tmp", umask="022")
    _sh(cluster, cluster.coworker, f"ln -s {precious} {out}/stopped.png")
    shown = _py(cluster, victim, _PNG, str(out / "tmp"), str(out / "stopped.png"), umask="022").stdout
    assert "symbolic link" in shown and "refused" in shown, shown
    assert precious.read_text() == "chapter one\n" and oct(precious.stat().st_mode & 0o777) == "0o644"


@needs_setfacl
def test_outputs_he_plants_in_her_acl_submit_folder_refuse_without_saying_a_job_runs(
        shared_cluster: SharedCluster) -> None:
    cluster = shared_cluster
    project = _acl_project(cluster, cluster.base / "played-acl-ids")
    peek = ("from guarded_sbatch.core.fsutil import state_dir\nfrom guarded_sbatch.scheduler.local_ids import "
            "peek_next_id\nprint(peek_next_id(state_dir() / 'local-jobs'))")
    first = int(_py(cluster, cluster.victim, peek, umask="022").stdout)
    _sh(cluster, cluster.coworker, f"cd {project} && for n in $(seq {first} {first + 300}); do : > slurm-$n.out; done")
    result = _cli(cluster, cluster.victim, "train.sh", cwd=project, umask="022")
    assert result.returncode != 0 and "would write over an existing file" in result.stderr, result.stderr
    assert "nothing was submitted" in result.stderr and "runs unguarded" not in result.stderr, result.stderr
