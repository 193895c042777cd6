"""The typed model of a run's sources (sources/run_sources.py): one list of SourceSpec, written to the record and
read back unchanged, the launch's older fields converted in one place, older records read tolerantly, and the
writer attribution that decides whether a file is the run's own."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from guarded_sbatch.sources.run_sources import (
    Attribution,
    FileWriter,
    RunSources,
    SourceSpec,
    WriterIdentity,
    attribute,
    run_specs,
)
from guarded_sbatch.records.registry import RunRecord
from guarded_sbatch.sources.writers import WriterFilter, event_file_writer, this_host


def test_a_run_sources_record_round_trips_through_json_unchanged() -> None:
    writer = WriterIdentity(uid=1000, hosts=("gpu07",), pids=(4242,), pid_hosts=("gpu07",), others=(777,), since=1.7e9,
                            run_id="ab12cd34")
    sources = RunSources(since=1.7e9, workdir="/p", stdout="/p/slurm-7.out", uid=1000, seen=writer,
                         specs=[SourceSpec("tensorboard", "/p/runs/a", "config key logdir"),
                                SourceSpec("jsonl", "/p/m.jsonl", "a guard flag", writer, ("/p",)),
                                SourceSpec("wandb", "ab12cd34", "guarded-sbatch", WriterIdentity(run_id="ab12cd34"), ("/p",))])
    text = json.dumps(sources.to_json())
    again = RunSources.from_json(json.loads(text))
    assert again == sources
    assert again is not None and again.source_specs() == sources.source_specs()


def test_the_launch_fields_become_one_list_of_specs_with_origin_and_writer() -> None:
    pinned = [SourceSpec("wandb", "id1", "guarded-sbatch", WriterIdentity(run_id="id1"), ("/p", "/p/src")),
              SourceSpec("mlflow", "", "the job's MLflow run", WriterIdentity(tag="t0"), ("/p",))]
    sources = RunSources(since=100.0, workdir="/p", specs=[*pinned, SourceSpec("tensorboard", "/p/runs/a", "--logdir")],
                         stdout="/p/slurm-7.out", stderr="/p/slurm-7.err", uid=5,
                         seen=WriterIdentity(pids=(11,), pid_hosts=("n1",)))
    specs = {spec.kind: spec for spec in sources.source_specs()}
    assert [s.kind for s in sources.source_specs()] == ["wandb", "mlflow", "tensorboard", "textlog", "textlog"]
    assert specs["tensorboard"] == SourceSpec("tensorboard", "/p/runs/a", "--logdir",
                                              WriterIdentity(uid=5, pids=(11,), pid_hosts=("n1",), since=100.0))
    assert specs["wandb"].writer == WriterIdentity(uid=5, pids=(11,), pid_hosts=("n1",), since=100.0, run_id="id1")
    assert specs["wandb"].search == ("/p", "/p/src") and sources.pinned("wandb") == pinned[0]
    assert sources.claimed_folders() == ["/p/runs/a"]  # a pinned run is known by its id, never claims a place
    assert specs["wandb"].origin == "guarded-sbatch"
    assert specs["mlflow"].writer.tag == "t0" and specs["mlflow"].search == ("/p",)


def test_a_hand_edited_record_is_read_tolerantly() -> None:
    old = {"since": 5, "workdir": "/p", "output_dirs": ["/p/runs/a", 3], "stdout": 7,
           "unknown_field": {"x": 1}, "specs": [{"kind": "tensorboard", "locator": "/x"}, {"locator": "/no-kind"}, "junk"],
           "seen": "not a dict", "uid": True}
    sources = RunSources.from_json(old)
    assert sources is not None
    assert sources.since == 5.0 and sources.output_dirs == ["/p/runs/a"]
    assert sources.stdout == "" and sources.uid is None and sources.seen == WriterIdentity()
    assert sources.specs == [SourceSpec("tensorboard", "/x")]
    assert RunSources.from_json({}) is None and RunSources.from_json("x") is None


def test_a_record_without_sources_still_names_its_guard_flag_paths() -> None:
    record = RunRecord(run_id="r-1", run_name="r", backend="local", job_id="1", submit_dir="/p", submitted_at=9.0,
                       tb_paths=["/p/tb"], log_paths=["/p/train.log"])
    specs = run_specs(record)
    assert [(s.kind, s.locator) for s in specs] == [("tensorboard", "/p/tb"), ("textlog", "/p/train.log")]
    assert all(s.origin == "a guard flag at launch" and s.writer.since == 9.0 for s in specs)


@pytest.mark.parametrize(("name", "created", "host", "pid"), [
    ("events.out.tfevents.1764745200.gpu07.4242.0", 1764745200.0, "gpu07", 4242),  # torch, tensorboard
    ("events.out.tfevents.1764745200.node-3.cluster.org.88.1.v2", 1764745200.0, "node-3.cluster.org", 88),  # TF 2
    ("events.out.tfevents.1764745200.vm", 1764745200.0, "vm", None),  # tensorboardX without a pid
])
def test_an_event_file_name_gives_its_writer(name: str, created: float, host: str, pid: int | None) -> None:
    found = event_file_writer(Path("/runs") / name, uid=7)
    assert (found.created, found.host, found.pid, found.uid) == (created, host, pid, 7)


def test_attribution_by_user_start_node_and_process() -> None:
    job = WriterIdentity(uid=1000, hosts=("gpu07",), pids=(10, 11), pid_hosts=("gpu07",), others=(20,), since=1000.5)

    def verdict(**found: object) -> Attribution:
        values: dict[str, object] = {"uid": 1000, "created": 1001.0, "host": "gpu07", "pid": None, **found}
        return attribute(job, FileWriter(**values))[0]  # type: ignore[arg-type]

    assert verdict(uid=1001) is Attribution.FOREIGN  # another user's file, whatever else it says
    assert verdict(created=999.0) is Attribution.FOREIGN  # older than the run
    assert verdict(created=1000.0) is not Attribution.FOREIGN  # TensorBoard names hold whole seconds
    assert verdict(host="gpu08", pid=10) is Attribution.FOREIGN  # another node
    assert verdict(pid=11) is Attribution.OWN
    assert verdict(host="gpu07.cluster.org", pid=10) is Attribution.OWN  # short and long host names agree
    assert verdict(pid=20) is Attribution.FOREIGN  # another job's process
    assert verdict(pid=30) is Attribution.UNKNOWN  # neither: read only when it is the one writer left
    assert verdict() is Attribution.UNKNOWN
    why = attribute(job, FileWriter(uid=1001, created=1001.0))[1]
    assert "uid 1001" in why and "uid 1000" in why


def _event_file(folder: Path, created: int, pid: int, last_write: float) -> Path:
    """A real event file (tensorboard's writer) named as process `pid` on this host would name it."""
    from source_writers import tb_event, write_tb_events

    written = write_tb_events(folder, [tb_event(created - 1_700_000_000 + i, "loss", 1.0) for i in range(3)])
    target = folder / f"events.out.tfevents.{created}.{this_host()}.{pid}.0"
    written.rename(target)
    os.utime(target, (last_write, last_write))
    return target


NOT_RUNNING = (4_000_001, 4_000_002, 4_000_003)  # above the default pid_max: never a live process here


def test_writers_one_after_another_are_one_run_restarted_in_place(tmp_path: Path) -> None:
    first = _event_file(tmp_path, 1_800_000_000, NOT_RUNNING[0], last_write=1_800_000_500)
    second = _event_file(tmp_path, 1_800_000_900, NOT_RUNNING[1], last_write=1_800_001_500)
    accept = WriterFilter(lambda: WriterIdentity(uid=os.geteuid()), lambda: [first, second])
    assert accept(first) and accept(second) and not accept.note()


def test_writers_active_at_the_same_time_are_two_runs_none_is_read(tmp_path: Path) -> None:
    first = _event_file(tmp_path, 1_800_000_000, NOT_RUNNING[0], last_write=1_800_000_500)
    second = _event_file(tmp_path, 1_800_000_100, NOT_RUNNING[1], last_write=1_800_000_600)
    accept = WriterFilter(lambda: WriterIdentity(uid=os.geteuid()), lambda: [first, second])
    assert not accept(first) and not accept(second)
    assert first.name in accept.note() and second.name in accept.note()


def test_with_the_runs_writer_known_only_an_earlier_attempt_joins_it(tmp_path: Path) -> None:
    earlier = _event_file(tmp_path, 1_800_000_000, NOT_RUNNING[0], last_write=1_800_000_500)
    own = _event_file(tmp_path, 1_800_000_900, NOT_RUNNING[1], last_write=1_800_001_500)
    beside = _event_file(tmp_path, 1_800_001_000, NOT_RUNNING[2], last_write=1_800_001_400)
    job = WriterIdentity(uid=os.geteuid(), pids=(NOT_RUNNING[1],), pid_hosts=(this_host(),))
    accept = WriterFilter(lambda: job, lambda: [earlier, own, beside])
    assert accept(own) and accept(earlier) and not accept(beside)
    assert "while this run wrote the same folder" in accept.note()


def test_a_requeued_job_on_a_node_sharing_the_sidecars_process_table_is_still_told_by_pid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dev cluster's nodes share one process table. The sidecar (on node2) saw the job's first start on
    node1, then only other jobs' processes while the job waited in the queue; the requeued start's file
    (node1, a new pid) is the run's own, and the first start's still is."""
    from guarded_sbatch.scheduler.interface import BackendTraits, JobInfo, JobState
    from guarded_sbatch.sidecar import source_set as source_set_module
    from guarded_sbatch.sidecar.plan import WatchPlan
    from guarded_sbatch.sidecar.source_set import SourceSet

    tables = iter([({10}, {20}, {"node1"}, {"node1", "node3"}),  # first start, another job on node3
                   (set(), {20, 21}, set(), {"node3", "node4"}),  # requeued: pending; other jobs only
                   ({30}, {20, 21}, {"node1"}, {"node1", "node3", "node4"})])  # the second start
    monkeypatch.setattr(source_set_module, "job_processes", lambda *a, **k: next(tables))
    monkeypatch.setattr(source_set_module, "this_host", lambda: "node2")

    class Queue:
        name = "slurm"
        traits = BackendTraits()

        def info(self, job_id: str) -> JobInfo:
            return JobInfo(job_id, JobState.RUNNING, work_dir=str(tmp_path))

    settings = WatchPlan(run_name="r", job_id="7", state_file=tmp_path / "state.json",
                               evidence_dir=tmp_path / "evidence")
    sources = SourceSet(settings, Queue())  # type: ignore[arg-type]
    for _ in range(3):
        sources._learn_writers()
    job = sources.job_writer()
    assert attribute(job, FileWriter(uid=job.uid, created=1.0, host="node1", pid=30))[0] is Attribution.OWN
    assert attribute(job, FileWriter(uid=job.uid, created=1.0, host="node1", pid=10))[0] is Attribution.OWN
    assert attribute(job, FileWriter(uid=job.uid, created=1.0, host="node1", pid=21))[0] is Attribution.FOREIGN
    # a host whose processes this table never held: its pids say nothing either way
    job = replace(job, hosts=())
    assert attribute(job, FileWriter(uid=job.uid, created=1.0, host="gpu9", pid=21))[0] is Attribution.UNKNOWN


def test_an_idle_writer_still_alive_on_a_node_of_the_table_is_not_a_restart_in_place(tmp_path: Path) -> None:
    """Writer A (alive, quiet for a while: an eval, a data load) and writer B, started after A's last write, both
    unknown to the job: A's process is alive in the process table of a node the sidecar sees, so the two were
    active at the same time — two runs, none read — not one run restarted in place."""
    import subprocess
    import sys
    import time

    from source_writers import tb_event, write_tb_events

    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        files = []
        now = int(time.time())
        for created, pid, last in ((now - 900, alive.pid, now - 800), (now - 400, NOT_RUNNING[0], now - 5)):
            written = write_tb_events(tmp_path, [tb_event(i, "loss", 1.0) for i in range(3)])
            target = tmp_path / f"events.out.tfevents.{created}.tablenode.{pid}.0"
            written.rename(target)
            os.utime(target, (last, last))
            files.append(target)
        job = WriterIdentity(uid=os.geteuid(), pid_hosts=("tablenode",))
        accept = WriterFilter(lambda: job, lambda: files)
        assert not accept(files[0]) and not accept(files[1])
        assert files[0].name in accept.note() and files[1].name in accept.note()
        # the same files where no table holds that node: nothing says A lives, so they read as one restarted run
        accept = WriterFilter(lambda: WriterIdentity(uid=os.geteuid()), lambda: files)
        assert accept(files[0]) and accept(files[1])
    finally:
        alive.kill()
        alive.wait(timeout=10)


def test_on_the_local_backend_a_neighbour_jobs_file_is_never_taken_before_the_job_writes_its_own(tmp_path: Path) -> None:
    """Two local jobs, one folder: the neighbour's event file is there first and is the only candidate (this job
    has not written yet, and it was created within the launch time's slack). The neighbour is another live local
    job's process group (as the local backend records it), so its file is another job's, not this run's. A
    process of no local job (a tmux session's, say) is no job's: left to the other rules."""
    import subprocess
    import sys
    import time

    from guarded_sbatch.sidecar.job_writers import job_processes
    from source_writers import tb_event, write_tb_events

    def job() -> subprocess.Popen[bytes]:  # as the local backend starts a job: its own session and group
        return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)

    neighbour, ours, loose = job(), job(), job()
    try:
        def seen() -> tuple[set[int], set[int]]:
            own, others, _, _ = job_processes("2", process_groups=True, pgid=ours.pid,
                                              other_groups=frozenset({neighbour.pid, ours.pid}), now=time.time() + 5)
            return own, others

        deadline = time.monotonic() + 10
        while (found := seen()) and (ours.pid not in found[0] or neighbour.pid not in found[1]):
            assert time.monotonic() < deadline, found
            time.sleep(0.1)
        own, others = found
        assert own == {ours.pid} and others == {neighbour.pid}  # not our own group, not the loose process
        assert job_processes("2", process_groups=True, pgid=None, now=time.time() + 10) == (set(), set(), set(), set())

        created = int(time.time())
        written = write_tb_events(tmp_path, [tb_event(i, "loss", 1.0) for i in range(3)])
        theirs = written.rename(tmp_path / f"events.out.tfevents.{created}.{this_host()}.{neighbour.pid}.0")
        writer = WriterIdentity(uid=os.geteuid(), since=created - 1.0).knowing(
            hosts=(this_host(),), pids=tuple(own), others=tuple(others), pid_hosts=(this_host(),))
        accept = WriterFilter(lambda: writer, lambda: [theirs])
        assert not accept(theirs)
        assert "another job's" in accept.note()
    finally:
        for process in (neighbour, ours, loose):
            process.kill()
            process.wait(timeout=10)


def test_the_local_backend_names_the_process_group_of_each_live_job(tmp_path: Path) -> None:
    from guarded_sbatch.scheduler.local import LocalScheduler

    scheduler = LocalScheduler(tmp_path / "local-jobs")
    for job_id, status in (("1", {"state": "RUNNING", "pgid": 4101}), ("2", {"state": "COMPLETED", "pgid": 4102}),
                           ("3", {"state": "PENDING"}), ("4", {"state": "RUNNING", "pgid": 4104})):
        (scheduler.root / job_id).mkdir(parents=True)
        (scheduler.root / job_id / "job.json").write_text(json.dumps(status))
    (scheduler.root / "notes").mkdir()
    assert scheduler.job_process_groups() == {"1": 4101, "4": 4104}


def test_the_local_backend_follows_jobs_that_start_and_end_between_calls(tmp_path: Path) -> None:
    """The scan starts from the oldest job live at the last call: jobs that ended leave, later ones are seen."""
    from guarded_sbatch.scheduler.local import LocalScheduler

    scheduler = LocalScheduler(tmp_path / "local-jobs")

    def write(job_id: str, status: dict[str, object]) -> None:
        (scheduler.root / job_id).mkdir(parents=True, exist_ok=True)
        (scheduler.root / job_id / "job.json").write_text(json.dumps(status))

    for job_id in ("1", "2"):
        write(job_id, {"state": "COMPLETED", "pgid": 4000 + int(job_id)})
    write("3", {"state": "RUNNING", "pgid": 4003})
    (scheduler.root / "4").mkdir()  # just submitted: no job.json yet
    assert scheduler.job_process_groups() == {"3": 4003}
    write("4", {"state": "RUNNING", "pgid": 4004})
    write("3", {"state": "CANCELLED", "pgid": 4003})
    write("5", {"state": "RUNNING", "pgid": 4005})
    assert scheduler.job_process_groups() == {"4": 4004, "5": 4005}
    write("4", {"state": "COMPLETED", "pgid": 4004})
    write("5", {"state": "COMPLETED", "pgid": 4005})
    assert scheduler.job_process_groups() == {}
    write("6", {"state": "RUNNING", "pgid": 4006})
    assert scheduler.job_process_groups() == {"6": 4006}


def test_a_named_link_and_the_recorded_folder_it_points_to_are_one_source_the_named_one(tmp_path: Path) -> None:
    """`--guard-tb LINK` and the config's logdir that LINK points to: one source, read through the user's path; when
    that path goes away the watcher is blind and says so (it no longer depended on which was found first)."""
    import math
    import time as clock

    from source_writers import tb_event, write_tb_events

    from guarded_sbatch.sidecar.plan import WatchPlan
    from guarded_sbatch.sidecar.source_set import SourceSet

    real = tmp_path / "project" / "runs" / "exp"
    write_tb_events(real, [tb_event(step, "train/loss", 2.0 * math.exp(-step / 40) + 0.1, wall_time=clock.time() + step)
                           for step in range(30)])
    link = tmp_path / "events-link"
    link.symlink_to(real, target_is_directory=True)
    settings = WatchPlan(run_name="r", job_id=None, state_file=tmp_path / "s.json", evidence_dir=tmp_path / "e",
                               sources=[SourceSpec("tensorboard", str(link), "--guard-tb")],
                               identity=RunSources(specs=[SourceSpec("tensorboard", str(real))],
                                                   workdir=str(tmp_path / "project")))
    sources = SourceSet(settings, None, live=False)
    assert sources.read() == 30
    tensorboard = [s for s in sources.sources if s.kind == "tensorboard"]
    assert len(tensorboard) == 1 and str(link) in tensorboard[0].describe(), [s.describe() for s in tensorboard]
    link.unlink()
    sources.read()
    assert str(link) in sources.read_error and "not found" in sources.read_error, sources.read_error
