"""Locked read-modify-write of run.json and the sidecar state: 20 concurrent writers x 500 updates lose
nothing, and `kill` saving its copy keeps the W&B run the sidecar recorded meanwhile."""

from __future__ import annotations

import multiprocessing as mp
import os
from pathlib import Path

import pytest

from guarded_sbatch.core.fsutil import read_json
from guarded_sbatch.records.registry import RunRecord, create_run, find_run, update_record
from guarded_sbatch.sidecar.state import SidecarState

WRITERS, UPDATES = 20, 500


def _writer(state_dir: str, folder: str, index: int) -> None:
    os.environ["GUARDED_SBATCH_STATE_DIR"] = state_dir
    name = f"w{index}"

    def bump(record: dict) -> None:
        counters = record.setdefault("tracker", {})
        counters[name] = counters.get(name, 0) + 1

    for _ in range(UPDATES):
        update_record(Path(folder), bump)


@pytest.fixture(autouse=True)
def isolated_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GUARDED_SBATCH_STATE_DIR", str(tmp_path / "state"))


def test_twenty_concurrent_writers_lose_no_update(tmp_path: Path) -> None:
    record = create_run("registry-race-run", "local", "7", submit_dir=str(tmp_path))
    context = mp.get_context("fork")
    procs = [context.Process(target=_writer, args=(str(tmp_path / "state"), str(record.folder), i))
             for i in range(WRITERS)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(600)
        assert proc.exitcode == 0
    counters = read_json(record.folder / "run.json")["tracker"]
    lost = sum(UPDATES - counters.get(f"w{i}", 0) for i in range(WRITERS))
    assert lost == 0, counters
    assert find_run("registry-race-run").job_id == "7"


def test_kill_saving_its_copy_keeps_what_the_sidecar_recorded(tmp_path: Path) -> None:
    create_run("kill-merge-run", "local", "8", submit_dir=str(tmp_path))
    kill_copy = find_run("kill-merge-run")  # loaded by `kill` before the sidecar writes
    update_record(kill_copy.folder, lambda r: r.update(tracker={"kind": "wandb", "run_path": "team/proj/abc"}))
    kill_copy.ended = "killed"
    kill_copy.save()
    raw = read_json(kill_copy.folder / "run.json")
    assert raw["ended"] == "killed" and raw["tracker"]["run_path"] == "team/proj/abc"


def test_tampered_state_and_record_fields_fall_back_safely(tmp_path: Path) -> None:
    path = tmp_path / "sidecar-state.json"
    path.write_text('{"checks": "many", "last_step": 5, "reported_anomalies": {"x": 1}, "finished": "yes"}')
    state = SidecarState.load(path)
    assert state.checks == 0 and state.last_step == 5 and state.reported_anomalies == [] and state.finished is False
    state.save(path)
    assert SidecarState.load(path).last_step == 5
    with pytest.raises(Exception) as info:
        RunRecord.from_json({"run_name": "x"})
    assert "run record" in str(info.value)
