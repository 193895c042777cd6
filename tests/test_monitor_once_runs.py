"""`monitor --once --tb DIR` on a folder holding an older run's files beside a live run's (real torch
SummaryWriter processes): it judges ONE run, the newest writer, says which file it read and which run it left
out (text and --json), never merges them; `--run` picks another, `--all-runs` judges each. Two layouts: both runs'
files in one folder (`SummaryWriter(log_dir=DIR)` twice, told apart by the pid in their names), and Lightning's
`DIR/lightning_logs/version_0` + `version_1`."""

from __future__ import annotations

import importlib.util
import io
import json
import subprocess
import sys
import time
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from conftest import require

pytestmark = pytest.mark.frameworks

WRITER = """
import math, sys, time
from torch.utils.tensorboard import SummaryWriter
folder, steps, nan_at, hold = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "hold"
writer = SummaryWriter(log_dir=folder)
for step in range(1, steps + 1):
    loss = 2.0 * math.exp(-step / 40) + 0.1
    writer.add_scalar("train/loss", float("nan") if 0 < nan_at <= step else loss, step)
writer.flush()
print("written", flush=True)
if hold:
    time.sleep(120)  # a run still going: its writer is alive, its file open
writer.close()
"""


def _write(folder: Path, *, nan_at: int, hold: bool) -> subprocess.Popen[str]:
    process = subprocess.Popen([sys.executable, "-c", WRITER, str(folder), "120", str(nan_at), "hold" if hold else "end"],
                               stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdout.readline().strip() == "written"
    return process


def _monitor(*args: str) -> tuple[int, str]:
    from guarded_sbatch.cli.monitor import run_monitor

    out = io.StringIO()
    with redirect_stdout(out):
        code = run_monitor(["--once", *args])
    return code, out.getvalue()


@pytest.fixture
def old_nan_and_live_healthy(tmp_path: Path, request: pytest.FixtureRequest,
                             monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, Path]:
    """(the folder named with --tb, the old NaN run's folder, the live run's folder)."""
    require(importlib.util.find_spec("torch") is not None, "torch not installed")
    monkeypatch.setenv("GUARDED_SBATCH_STATE_DIR", str(tmp_path / "state"))
    top = tmp_path / "runs" / "exp"
    old_dir, live_dir = (top, top) if request.param == "one-folder" else (
        top / "lightning_logs" / "version_0", top / "lightning_logs" / "version_1")
    old = _write(old_dir, nan_at=30, hold=False)
    old.wait(timeout=60)
    time.sleep(1.1)  # event file names hold whole seconds
    live = _write(live_dir, nan_at=0, hold=True)
    request.addfinalizer(lambda: (live.kill(), live.wait()))
    return top, old_dir, live_dir


@pytest.mark.parametrize("old_nan_and_live_healthy", ["one-folder", "version-folders"], indirect=True)
def test_the_newest_run_is_judged_and_the_old_one_named_as_left_out(
        old_nan_and_live_healthy: tuple[Path, Path, Path]) -> None:
    top, old_dir, live_dir = old_nan_and_live_healthy
    old_file = next(f for f in old_dir.glob("events.out.tfevents.*")
                    if f.stat().st_mtime == min(p.stat().st_mtime for p in old_dir.glob("events.out.tfevents.*")))
    live_file = max(live_dir.glob("events.out.tfevents.*"), key=lambda f: f.stat().st_mtime)
    assert old_file != live_file

    code, text = _monitor("--tb", str(top))
    assert code == 0 and text.startswith("CONTINUE"), text  # the old run's NaN is not this run's
    assert f"read: {live_file}" in text and str(old_file) not in text.split("left out", 1)[0], text
    assert "left out 1 other run(s)" in text and "--all-runs" in text, text

    code, text = _monitor(str(top))  # the folder as the one argument: the same, where a search would take none
    assert code == 0 and f"read: {live_file}" in text and "left out 1 other run(s)" in text, text

    code, raw = _monitor("--tb", str(top), "--json")
    payload = json.loads(raw)
    assert code == 0 and payload["decision"] == "CONTINUE", payload
    assert payload["read"] == [str(live_file)] and payload["run"]["live"] is True, payload
    assert [run["files"] for run in payload["left_out"]] == [[str(old_file)]], payload

    pid = old_file.name.split(".")[-2]
    code, text = _monitor("--tb", str(top), "--run", pid)  # the old run, named by its writer's pid
    assert code == 11 and text.startswith("STOP"), text
    assert f"read: {old_file}" in text and "left out 1 other run(s)" in text, text

    code, raw = _monitor("--tb", str(top), "--all-runs", "--json")
    payload = json.loads(raw)
    assert code == 11 and payload["decision"] == "STOP", payload  # the worst decision is the exit code
    decided = {tuple(run["read"]): run["decision"] for run in payload["runs"]}
    assert decided == {(str(live_file),): "CONTINUE", (str(old_file),): "STOP"}, payload


def test_a_run_named_that_is_not_there_lists_the_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from source_writers import tb_event, write_tb_events

    monkeypatch.setenv("GUARDED_SBATCH_STATE_DIR", str(tmp_path / "state"))
    write_tb_events(tmp_path / "runs" / "a", [tb_event(step, "loss", 1.0) for step in range(5)])
    result = subprocess.run([sys.executable, "-m", "guarded_sbatch", "monitor", "--once", "--tb",
                             str(tmp_path / "runs"), "--run", "nosuch"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "--run nosuch: matches no run" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and str(tmp_path / "runs" / "a") in result.stderr
