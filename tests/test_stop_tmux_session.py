"""stop_tmux_session on a real tmux server (private to the test): the plain session, a trainer that ignores
C-c, a session that is not there, and a watcher inside the session it stops (its own pane left alone)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_helpers import wait_for
from guarded_sbatch.actions.stop_targets import stop_tmux_session, tmux_session_exists


@pytest.fixture
def tmux(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    assert shutil.which("tmux"), "tmux is needed (scripts/test installs it)"
    monkeypatch.setenv("TMUX_TMPDIR", str(tmp_path))  # a tmux server of this test only
    monkeypatch.delenv("TMUX", raising=False)
    env = dict(os.environ)
    try:
        yield env
    finally:
        subprocess.run(["tmux", "kill-server"], env=env, timeout=30, capture_output=True, check=False)


def _new_session(env: dict[str, str], session: str, command: str) -> None:
    subprocess.run(["tmux", "new-session", "-d", "-s", session, command], env=env, check=True, timeout=30)
    wait_for(lambda: tmux_session_exists(session), 30, 0.05, "the tmux session")


def _stubborn_session(env: dict[str, str], session: str) -> None:
    """A session whose shell ignores C-c, once it does: its trap is set before it starts its `sleep` child."""
    _new_session(env, session, "sh -c 'trap \"\" INT; sleep 300 & wait; sleep 300'")
    pane = subprocess.run(["tmux", "list-panes", "-t", f"={session}", "-F", "#{pane_pid}"], env=env, check=True,
                          timeout=30, capture_output=True, text=True).stdout.split()[0]
    wait_for(lambda: subprocess.run(["pgrep", "-P", pane, "sleep"], capture_output=True, timeout=30).returncode == 0,
             30, 0.05, "the shell's trap and its sleep")


def test_a_session_that_ends_at_c_c_is_stopped_by_the_interrupt(tmux: dict[str, str]) -> None:
    _new_session(tmux, "gs-stop-plain", "sleep 300")
    outcome = stop_tmux_session("gs-stop-plain", grace_s=10, poll_s=0.05)
    assert outcome.ok and outcome.found and outcome.final_state == "gone", outcome
    assert outcome.detail.startswith("tmux:gs-stop-plain: C-c sent to 1 pane(s) of tmux session gs-stop-plain; ")
    assert "the trainer exited" in outcome.detail and outcome.detail.endswith("session gone, no process of it left")
    assert not tmux_session_exists("gs-stop-plain")


def test_a_trainer_that_ignores_c_c_is_ended_by_kill_session_after_the_grace(tmux: dict[str, str]) -> None:
    _stubborn_session(tmux, "gs-stop-stubborn")
    outcome = stop_tmux_session("gs-stop-stubborn", grace_s=0.5, poll_s=0.05)
    assert outcome.ok and outcome.final_state == "gone", outcome
    assert "still running 0.5 s after the interrupt" in outcome.detail
    assert "tmux kill-session -t gs-stop-stubborn" in outcome.detail
    assert outcome.detail.endswith("session gone, no process of it left")
    assert not tmux_session_exists("gs-stop-stubborn")


def test_a_session_that_is_not_running_is_reported_gone_without_a_stop(tmux: dict[str, str]) -> None:
    outcome = stop_tmux_session("gs-stop-absent", grace_s=1, poll_s=0.05)
    assert (outcome.method, outcome.ok, outcome.found, outcome.final_state) == ("tmux", True, False, "gone")
    assert outcome.detail == "tmux session gs-stop-absent is not running (already ended)"


def test_a_watcher_inside_the_session_stops_the_other_panes_and_leaves_its_own(
        tmux: dict[str, str], tmp_path: Path) -> None:
    session, result = "gs-stop-inside", tmp_path / "outcome.json"
    _stubborn_session(tmux, session)
    watcher = (
        f"{sys.executable} -c 'import json, sys; from guarded_sbatch.actions.stop_targets import stop_tmux_session; "
        f"o = stop_tmux_session(sys.argv[1], grace_s=0.5, poll_s=0.05); "
        f"open(sys.argv[2], \"w\").write(json.dumps([o.ok, o.detail]))' {session} {result}; sleep 300"
    )
    subprocess.run(["tmux", "new-window", "-t", f"={session}:", watcher], env=tmux, check=True, timeout=30)
    ok, detail = wait_for(lambda: result.is_file() and result.stat().st_size and json.loads(result.read_text()),
                          60, 0.1, "the watcher's outcome")
    assert ok, detail
    assert "this watcher runs in pane(s) %" in detail and "of the session: left alone" in detail
    assert "C-c sent to 1 pane(s)" in detail and "tmux kill-pane on 1 pane(s)" in detail
    assert detail.endswith("panes gone, no process of it left")
    assert tmux_session_exists(session)  # the watcher's own window is still there
    panes = subprocess.run(["tmux", "list-panes", "-s", "-t", f"={session}"], env=tmux, capture_output=True,
                           text=True, timeout=30, check=False).stdout.splitlines()
    assert len(panes) == 1
