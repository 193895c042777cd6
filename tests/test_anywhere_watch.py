"""Watch a run wherever it was launched and stop it the way it was launched, with real components:
a tmux session, an sshd on a local port with a generated key, a process group with a stubborn child."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from e2e_helpers import wait_for
from guarded_sbatch.actions.stop_targets import parse_stop_target, process_table
from guarded_sbatch.core.errors import UsageError
from guarded_sbatch.sources.command_log import byte_limit_of, complete_lines, new_lines

TRAINER = Path(__file__).with_name("anywhere_trainer.py")


# --- the overlap of successive windows (pure) ------------------------------------------------------


def test_new_lines_follow_the_overlap_and_survive_rotation() -> None:
    first = [f"step={i} loss=1" for i in range(1, 51)]
    assert new_lines([], first) == (first, False)
    second = first[10:] + ["step=51 loss=1", "step=52 loss=1"]  # the window moved on
    assert new_lines(first[-32:], second) == (["step=51 loss=1", "step=52 loss=1"], True)
    assert new_lines(second[-32:], second) == ([], True)  # nothing new
    rotated = ["starting", "step=1 loss=2"]  # truncated / rotated / restarted log
    assert new_lines(second[-32:], rotated) == (rotated, False)


def test_window_edges_a_cut_first_line_and_an_unfinished_last_line() -> None:
    assert complete_lines("a\nb\nc", byte_limit=None) == ["a", "b"]
    assert complete_lines("p=1\nb\n", byte_limit=6) == ["b"]  # cut by tail -c at its start
    assert byte_limit_of(["ssh", "gpu07", "tail", "-c", "2000000", "/x"]) == 2_000_000
    assert byte_limit_of(["ssh", "gpu07", "tail -c 2M /x"]) == 2 * 1024**2
    assert byte_limit_of(["tail", "-n", "100", "/x"]) is None


def test_command_log_source_reads_each_line_once_across_a_moving_window_and_a_rotation(tmp_path: Path) -> None:
    from guarded_sbatch.sources.base import SourceError
    from guarded_sbatch.sources.command_log import CommandLogSource

    log = tmp_path / "train.log"
    log.write_text("".join(f"step={s} loss={1 / s:.4f}\n" for s in range(1, 201)))
    source = CommandLogSource(f"tail -c 600 {log}", tmp_path / "spool.log")  # a window of ~30 lines
    first = source.read_new()
    assert first and min(p.step for p in first) > 150 and max(p.step for p in first) == 200
    with open(log, "a") as handle:
        handle.write("".join(f"step={s} loss=0.1\n" for s in range(201, 211)) + "step=211 lo")  # unfinished line
    assert sorted(p.step for p in source.read_new()) == list(range(201, 211))
    assert source.read_new() == []  # the same window again: nothing new
    log.write_text("step=211 loss=0.1\nstep=212 loss=0.1\n")  # rotated: a new, short log
    assert sorted(p.step for p in source.read_new()) == [211, 212]
    log.unlink()
    with pytest.raises(SourceError, match="unreachable"):
        source.read_new()  # tail fails: the judge reads this as WAIT


def test_stop_targets_parse_and_bad_ones_are_usage_errors() -> None:
    assert parse_stop_target("ssh:alice@gpu07:2222:4242").port == 2222
    assert parse_stop_target("ssh:gpu07:4242").value == "gpu07"
    assert parse_stop_target("tmux:train-a").value == "train-a"
    for bad in ("pid:abc", "tmux:", "ssh:4242", "nohup:1", "slurm:x"):
        with pytest.raises(UsageError):
            parse_stop_target(bad)


# --- helpers ---------------------------------------------------------------------------------------


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "GUARDED_SBATCH_STATE_DIR": str(tmp_path / "state"), "TMUX_TMPDIR": str(tmp_path), "NO_COLOR": "1"}


def _monitor(tmp_path: Path, env: dict[str, str], *args: str) -> tuple[subprocess.Popen[str], Path, Path]:
    state_dir = tmp_path / "watch"
    out = tmp_path / "monitor.out"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "guarded_sbatch",
            "monitor",
            "--fast-interval",
            "1",
            "--state-dir",
            str(state_dir),
            "--stop-grace",
            "2",
            *args,
        ],
        env=env,
        stdout=open(out, "w"),
        stderr=subprocess.STDOUT,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    return proc, state_dir, out


def _state(state_dir: Path) -> dict:
    try:
        return json.loads((state_dir / "sidecar-state.json").read_text())
    except (OSError, ValueError):
        return {}


def _wait_healthy(state_dir: Path, proc: subprocess.Popen[str], out: Path) -> int:
    def healthy() -> int | None:
        assert proc.poll() is None, out.read_text()
        state = _state(state_dir)
        return state["checks"] if state.get("last_decision") == "CONTINUE" and state.get("checks", 0) >= 2 else None

    return wait_for(healthy, 60, 0.2, "the watcher to judge the run healthy")


def _group_alive(pgid: int) -> set[int]:
    return {p.pid for p in process_table().values() if p.pgid == pgid and not p.zombie}


def _other_users_process() -> int:
    from guarded_sbatch.actions.stop_targets import real_uid

    me = os.getuid()
    return next(p.pid for p in process_table().values() if p.pid > 1 and not p.zombie and real_uid(p.pid) not in (None, me))


def _end(proc: subprocess.Popen) -> None:  # type: ignore[type-arg]
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            proc.kill()
        proc.wait()


# --- tmux ------------------------------------------------------------------------------------------


def test_tmux_run_going_nan_is_stopped_within_two_polls_and_the_session_is_gone(tmp_path: Path) -> None:
    assert shutil.which("tmux"), "tmux is needed (scripts/test installs it)"
    env = _env(tmp_path)
    log, nan_file, session = tmp_path / "train.log", tmp_path / "go-nan", "gs-anywhere-test"
    trainer = f"{sys.executable} {TRAINER} --log {log} --nan-file {nan_file}"
    subprocess.run(["tmux", "new-session", "-d", "-s", session, trainer], env=env, check=True, timeout=30)
    monitor = None
    try:
        wait_for(log.exists, 30, what="the trainer's log")
        monitor, state_dir, out = _monitor(tmp_path, env, "--log-command", f"tail -c 2000000 {log}", "--stop", f"tmux:{session}")
        checks_before = _wait_healthy(state_dir, monitor, out)
        nan_file.touch()
        assert monitor.wait(timeout=120) == 0, out.read_text()
        state = _state(state_dir)
        output = out.read_text()
        assert state["last_decision"] == "STOP" and state["finished"], output
        assert state["checks"] - checks_before <= 2, output  # the poll that saw NaN, or the next one
        assert "sidecar: stop done" in output and "FINAL_SUMMARY" in output
        has = subprocess.run(["tmux", "has-session", "-t", f"={session}"], env=env, timeout=30, check=False)
        assert has.returncode != 0  # the session is gone
        evidence = json.loads(Path(state["evidence"]).read_text())
        assert evidence["stop"].startswith(f"tmux:{session}: C-c sent")
        assert "session gone, no process of it left" in evidence["stop"]
        assert f"command: tail -c 2000000 {log}" in evidence["files_inspected"]
        assert "loss=nan" in Path(evidence["log_snippet"]).read_text()  # our copy of what the command printed
    finally:
        if monitor is not None:
            _end(monitor)
        subprocess.run(["tmux", "kill-server"], env=env, timeout=30, capture_output=True, check=False)


def test_a_watcher_inside_the_same_tmux_session_stops_the_trainer_and_leaves_its_own_pane(tmp_path: Path) -> None:
    env = _env(tmp_path)
    log, nan_file, session = tmp_path / "train.log", tmp_path / "go-nan", "gs-anywhere-shared"
    state_dir, out = tmp_path / "watch", tmp_path / "monitor.out"
    trainer = f"{sys.executable} {TRAINER} --log {log} --nan-file {nan_file}"
    watcher = (
        f"{sys.executable} -m guarded_sbatch monitor --fast-interval 1 --stop-grace 2 --state-dir {state_dir} "
        f"--log-command 'tail -c 100000 {log}' --stop tmux:{session} > {out} 2>&1; sleep 30"
    )
    subprocess.run(["tmux", "new-session", "-d", "-s", session, trainer], env=env, check=True, timeout=30)
    try:
        subprocess.run(["tmux", "new-window", "-t", f"={session}:", watcher], env=env, check=True, timeout=30)
        wait_for(lambda: _state(state_dir).get("last_decision") == "CONTINUE", 60, 0.2, "a healthy verdict")
        nan_file.touch()
        wait_for(lambda: _state(state_dir).get("finished"), 120, 0.2, "the watcher to stop the run")
        evidence = json.loads(Path(_state(state_dir)["evidence"]).read_text())
        assert "this watcher runs in pane(s)" in evidence["stop"] and "panes gone, no process of it left" in evidence["stop"]
        panes = subprocess.run(
            ["tmux", "list-panes", "-s", "-t", f"={session}", "-F", "#{pane_current_command}"],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        ).stdout.split()
        assert len(panes) == 1  # the watcher's window, still there (sleeping); the trainer's is gone
    finally:
        subprocess.run(["tmux", "kill-server"], env=env, timeout=30, capture_output=True, check=False)


# --- process group ---------------------------------------------------------------------------------


def test_pid_stop_of_a_group_with_a_child_that_ignores_sigint_ends_with_sigkill(tmp_path: Path) -> None:
    env = _env(tmp_path)
    log, nan_file = tmp_path / "train.log", tmp_path / "go-nan"
    leader = subprocess.Popen(
        [sys.executable, str(TRAINER), "--log", str(log), "--nan-file", str(nan_file), "--child"],
        start_new_session=True,
        stdin=subprocess.DEVNULL,
    )
    monitor = None
    try:
        wait_for(lambda: len(_group_alive(leader.pid)) >= 2, 30, what="the trainer and its child")
        monitor, state_dir, out = _monitor(tmp_path, env, "--log-command", f"cat {log}", "--stop", f"pid:{leader.pid}")
        _wait_healthy(state_dir, monitor, out)
        nan_file.touch()
        assert monitor.wait(timeout=120) == 0, out.read_text()
        leader.wait(timeout=10)  # died at SIGINT; reaped here
        assert not _group_alive(leader.pid)
        evidence = json.loads(Path(_state(state_dir)["evidence"]).read_text())
        stop = evidence["stop"]
        # the leader went at SIGINT, the child ignores SIGINT and SIGTERM: after both graces, SIGKILL ended it
        assert "SIGINT to process group" in stop and "SIGTERM to process group" in stop, stop
        assert stop.rstrip().endswith("after SIGKILL") and "gone" in stop.rsplit(";", 1)[-1], stop
    finally:
        if monitor is not None:
            _end(monitor)
        _end(leader)


def test_another_users_process_is_never_signalled(tmp_path: Path) -> None:
    from guarded_sbatch.actions.stop_targets import stop_process_group

    child = None
    if os.getuid() == 0:  # make one: a process group of user nobody
        child = subprocess.Popen(["sleep", "300"], start_new_session=True, user=65534, group=65534)
        target = child.pid
    else:  # as a plain user, other users' processes are all around (root's, at least)
        target = _other_users_process()
    try:
        outcome = stop_process_group(target, grace_s=0.5)
        assert not outcome.ok and ("another user" in outcome.detail or "not ours" in outcome.detail), outcome.detail
        assert "SIGINT to" not in outcome.detail  # nothing was sent
        if child is not None:
            assert child.poll() is None  # still running
    finally:
        if child is not None:
            child.kill()
            child.wait()


def test_a_pid_target_that_holds_the_watcher_itself_is_refused() -> None:
    from guarded_sbatch.actions.stop_targets import stop_process_group

    outcome = stop_process_group(os.getpid(), grace_s=0.5)  # refused before any signal is sent
    assert not outcome.ok and "includes this watcher" in outcome.detail, outcome.detail


def test_watch_with_a_pid_target_ends_when_the_run_ends_by_itself(tmp_path: Path) -> None:
    env = _env(tmp_path)
    log = tmp_path / "train.log"
    trainer = subprocess.Popen(
        [sys.executable, str(TRAINER), "--log", str(log), "--steps", "150"], start_new_session=True, stdin=subprocess.DEVNULL
    )
    monitor = None
    try:
        wait_for(log.exists, 30, what="the trainer's log")
        monitor, state_dir, out = _monitor(tmp_path, env, "--log-command", f"cat {log}", "--stop", f"pid:{trainer.pid}")
        assert trainer.wait(timeout=60) == 0
        assert monitor.wait(timeout=60) == 0, out.read_text()
        output = out.read_text()
        assert f"training job pid:{trainer.pid} ended COMPLETED; sidecar done" in output, output
        assert "- Decision: STOP" not in output and _state(state_dir)["last_decision"] == "CONTINUE"
    finally:
        if monitor is not None:
            _end(monitor)
        _end(trainer)


def test_stop_command_is_checked_against_the_target_and_escalated_when_it_did_not_take(tmp_path: Path) -> None:
    from guarded_sbatch.actions.stop_targets import stop_with_command

    for command, took_by_itself in (("true", False), ("kill -TERM -- -{pgid}", True)):
        trainer = subprocess.Popen(
            [sys.executable, str(TRAINER), "--log", str(tmp_path / "t.log")], start_new_session=True, stdin=subprocess.DEVNULL
        )
        try:
            wait_for(lambda t=trainer: _group_alive(t.pid), 30, what="the trainer")
            outcome = stop_with_command(command.format(pgid=trainer.pid), parse_stop_target(f"pid:{trainer.pid}"), grace_s=1.0)
            trainer.wait(timeout=10)
            assert outcome.ok and not _group_alive(trainer.pid), outcome.detail
            if took_by_itself:
                assert outcome.detail.endswith(f"pid:{trainer.pid} gone (checked)"), outcome.detail
            else:
                assert "still running 1 s later: pid:" in outcome.detail and "gone" in outcome.detail, outcome.detail
        finally:
            _end(trainer)


# --- sshd ------------------------------------------------------------------------------------------


class Sshd:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.binary = shutil.which("sshd") or "/usr/sbin/sshd"
        assert os.path.exists(self.binary), "openssh-server is needed (scripts/test installs it)"
        folder.mkdir(parents=True, exist_ok=True)
        for name in ("host_key", "id"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(folder / name)], check=True, timeout=30)
        authorized = folder / "authorized_keys"
        authorized.write_text((folder / "id.pub").read_text())
        authorized.chmod(0o600)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.config = folder / "sshd_config"
        self.config.write_text(
            "\n".join(
                [
                    f"Port {self.port}",
                    "ListenAddress 127.0.0.1",
                    f"HostKey {folder / 'host_key'}",
                    f"AuthorizedKeysFile {authorized}",
                    f"PidFile {folder / 'sshd.pid'}",
                    "StrictModes no",
                    "UsePAM no",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "PermitRootLogin prohibit-password",
                    "LogLevel ERROR",
                    "",
                ]
            )
        )
        if os.getuid() == 0:
            os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege separation folder
        self.proc: subprocess.Popen[bytes] | None = None
        self.client_options = [
            "-F",
            "/dev/null",
            "-i",
            str(folder / "id"),
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "LogLevel=ERROR",
            "-o",
            "BatchMode=yes",
            "-o",
            "ConnectTimeout=5",
        ]

    def ssh_words(self) -> list[str]:
        return ["ssh", *self.client_options, "-p", str(self.port), "127.0.0.1"]

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [self.binary, "-D", "-e", "-f", str(self.config)],
            stderr=open(self.folder / "sshd.log", "ab"),
            stdin=subprocess.DEVNULL,
        )
        wait_for(
            lambda: subprocess.run([*self.ssh_words(), "true"], capture_output=True, timeout=30, check=False).returncode == 0,
            30,
            0.2,
            f"sshd on port {self.port} ({(self.folder / 'sshd.log')})",
        )

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)


@pytest.fixture
def sshd(tmp_path: Path):  # type: ignore[no-untyped-def]
    server = Sshd(tmp_path / "sshd")
    server.start()
    yield server
    server.stop()


def test_log_served_by_sshd_waits_while_sshd_is_down_and_stops_when_it_is_back(tmp_path: Path, sshd: Sshd) -> None:
    import shlex

    env = {**_env(tmp_path), "GUARDED_SBATCH_SSH_OPTIONS": shlex.join(sshd.client_options)}
    log, nan_file = tmp_path / "train.log", tmp_path / "go-nan"
    trainer = subprocess.Popen(
        [sys.executable, str(TRAINER), "--log", str(log), "--nan-file", str(nan_file), "--step-seconds", "0.1"],
        start_new_session=True,
        stdin=subprocess.DEVNULL,
    )
    monitor = None
    try:
        wait_for(log.exists, 30, what="the trainer's log")
        command = shlex.join([*sshd.ssh_words(), "tail", "-c", "2000000", str(log)])
        monitor, state_dir, out = _monitor(
            tmp_path,
            env,
            "--log-command",
            command,
            "--log-command-timeout",
            "10",
            "--stop",
            f"ssh:127.0.0.1:{sshd.port}:{trainer.pid}",
        )
        _wait_healthy(state_dir, monitor, out)
        sshd.stop()
        waiting = wait_for(
            lambda: (s := _state(state_dir)).get("last_decision") == "WAIT" and s, 60, 0.2, "WAIT while sshd is down"
        )
        assert waiting["last_reason"] == "source_unreadable" and "unreachable" in waiting["last_message"]
        nan_file.touch()  # the run breaks while we cannot see it
        blind_from = waiting["checks"]
        wait_for(lambda: _state(state_dir).get("checks", 0) >= blind_from + 2, 60, 0.2, "two more blind polls")
        assert _state(state_dir)["last_decision"] == "WAIT" and monitor.poll() is None  # never STOP blind
        assert trainer.poll() is None
        sshd.start()
        assert monitor.wait(timeout=120) == 0, out.read_text()
        output = out.read_text()
        assert "- Decision: STOP" in output and "sidecar: stop done" in output, output
        assert trainer.wait(timeout=10) is not None
        evidence = json.loads(Path(_state(state_dir)["evidence"]).read_text())
        assert evidence["stop"].startswith(f"ssh:127.0.0.1:{sshd.port}:{trainer.pid}: SIGINT to process group")
        assert "gone after SIGINT" in evidence["stop"]
    finally:
        if monitor is not None:
            _end(monitor)
        _end(trainer)


# --- W&B online API --------------------------------------------------------------------------------


def test_wandb_api_source_reads_by_step_and_a_silent_server_is_unreachable_not_a_hang(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import threading
    import types

    from guarded_sbatch.sources.base import SourceError
    from guarded_sbatch.sources.wandb_api import WandbApiSource

    gate = threading.Event()
    asked: list[int] = []

    class Run:
        def scan_history(self, keys, page_size, min_step):  # type: ignore[no-untyped-def]
            asked.append(min_step)
            if len(asked) == 2:
                gate.wait(30)  # the server goes silent for the second request
            return iter([{"_step": s, "_timestamp": 1.0, "loss": 1.0 / (s + 1)} for s in range(min_step, min_step + 3)])

    fake = types.SimpleNamespace(Api=lambda timeout: types.SimpleNamespace(run=lambda path: Run()))
    monkeypatch.setitem(sys.modules, "wandb", fake)
    source = WandbApiSource("https://wandb.ai/ent/proj/runs/abc123?workspace=x", timeout_s=0.5)
    assert [p.step for p in source.read_new()] == [0, 1, 2]
    with pytest.raises(SourceError, match="unreachable: no answer in 0.5 s"):
        source.read_new()
    with pytest.raises(SourceError, match="still out"):
        source.read_new()  # the same request is waited for again, not a second one
    assert asked == [0, 3]
    gate.set()
    assert [p.step for p in source.read_new()] == [3, 4, 5]
    assert [p.step for p in source.read_new()] == [6, 7, 8] and asked == [0, 3, 6]


# --- a Slurm job, watched through its log by a command -----------------------------------------------


@pytest.mark.slurm
def test_slurm_target_is_cancelled_through_the_scheduler(tmp_path: Path, slurm_cluster: None) -> None:
    env = _env(tmp_path)
    log, nan_file = tmp_path / "train.log", tmp_path / "go-nan"
    submitted = subprocess.run(
        [
            "sbatch",
            "--parsable",
            "--job-name=gs-anywhere-slurm",
            "--cpus-per-task=1",
            "--mem=200M",
            f"--chdir={tmp_path}",
            f"--output={tmp_path / 'job.out'}",
            "--wrap",
            f"exec {sys.executable} {TRAINER} --log {log} --nan-file {nan_file}",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
        env=env,
    )
    job_id = submitted.stdout.strip().split(";")[0]
    monitor = None
    try:
        wait_for(log.exists, 120, what="the Slurm job's log")
        monitor, state_dir, out = _monitor(
            tmp_path, env, "--log-command", f"tail -c 100000 {log}", "--stop", f"slurm:{job_id}", "--job-poll", "5"
        )
        _wait_healthy(state_dir, monitor, out)
        nan_file.touch()
        assert monitor.wait(timeout=180) == 0, out.read_text()
        evidence = json.loads(Path(_state(state_dir)["evidence"]).read_text())
        assert evidence["stop"].startswith(f"job {job_id} cancelled, now CANCELLED"), evidence["stop"]
    finally:
        if monitor is not None:
            _end(monitor)
        subprocess.run(["scancel", job_id], timeout=30, check=False, capture_output=True)


def test_ssh_stop_refuses_another_users_process(tmp_path: Path, sshd: Sshd, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import shlex

    from guarded_sbatch.actions.stop_targets import stop_target

    monkeypatch.setenv("GUARDED_SBATCH_SSH_OPTIONS", shlex.join(sshd.client_options))
    child = None
    if os.getuid() == 0:
        child = subprocess.Popen(["sleep", "300"], start_new_session=True, user=65534, group=65534)
        pid = child.pid
    else:
        pid = _other_users_process()
    try:
        outcome = stop_target(parse_stop_target(f"ssh:127.0.0.1:{sshd.port}:{pid}"), grace_s=1)
        assert not outcome.ok and "refused: process group" in outcome.detail, outcome.detail
        if child is not None:
            assert child.poll() is None
    finally:
        if child is not None:
            child.kill()
            child.wait()


def test_monitor_reads_a_wandb_run_by_path_or_url_and_waits_when_it_is_unreachable(tmp_path: Path) -> None:
    fake = tmp_path / "fake" / "wandb"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(
        "import math, os\n"
        "class _Run:\n"
        "    def scan_history(self, keys=None, page_size=1000, min_step=0):\n"
        "        if os.environ.get('FAKE_WANDB_DOWN'):\n"
        "            raise ConnectionError('Max retries exceeded with url: /graphql')\n"
        "        return iter([{'_step': s, '_timestamp': 1.0, 'loss': math.nan if s >= 20 else 1.0} for s in range(25)])\n"
        "class Api:\n"
        "    def __init__(self, timeout=None):\n"
        "        pass\n"
        "    def run(self, path):\n"
        "        assert path == 'ent/proj/abc123', path\n"
        "        return _Run()\n"
    )
    env = {**_env(tmp_path), "PYTHONPATH": f"{fake.parent}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}

    def once(target: str, **extra: str) -> dict:
        result = subprocess.run(
            [sys.executable, "-m", "guarded_sbatch", "monitor", "--once", "--json", target],
            env={**env, **extra},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        payload = json.loads(result.stdout)
        assert result.returncode == {"CONTINUE": 0, "WAIT": 10, "STOP": 11}[payload["decision"]], result.stderr
        return payload

    for target in ("https://wandb.ai/ent/proj/runs/abc123?workspace=user", "ent/proj/runs/abc123", "ent/proj/abc123"):
        verdict = once(target)
        assert (verdict["decision"], verdict["reason"], verdict["data_source"]) == ("STOP", "non_finite_loss", "wandb_ok")
    down = once("ent/proj/abc123", FAKE_WANDB_DOWN="1")
    assert (down["decision"], down["reason"], down["data_source"]) == ("WAIT", "source_unreadable", "unreachable")
    assert "Max retries exceeded" in down["message"]
