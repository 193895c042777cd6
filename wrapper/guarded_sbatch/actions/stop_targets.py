"""Stop a run the way it was launched outside a scheduler, and check that it took.

`tmux:SESSION`  interrupt every pane (C-c), give the trainer a grace period to save and exit, then kill
                the session; whatever of its processes survives the hang-up gets SIGTERM, then SIGKILL.
`pid:PID`       the process group of PID: SIGINT, SIGTERM, SIGKILL, each after the grace period of the one
                before, until no process of the group is left.
`ssh:[USER@]HOST[:PORT]:PID`   the same on another machine, by a POSIX sh script run through ssh.
(`slurm:JOBID` is resolved by the command line into a job to cancel through the scheduler.)

A process of another user is never signalled: a target with one is refused. Every step taken is in the
outcome's detail, which goes into the evidence bundle.
"""

from __future__ import annotations

import os
import shlex
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

from guarded_sbatch.core import door
from guarded_sbatch.actions.stop_outcome import StopOutcome
from guarded_sbatch.core.errors import CommandError, UsageError
from guarded_sbatch.core.runner import run_command

KINDS = ("tmux", "pid", "ssh", "slurm")
SSH_OPTIONS_ENV = "GUARDED_SBATCH_SSH_OPTIONS"  # extra ssh words, e.g. "-i key -F /dev/null"
KILL_WAIT_S = 5.0


@dataclass(frozen=True)
class StopTarget:
    kind: str
    value: str  # session name, pid, job id, or host for ssh
    pid: int | None = None
    port: int | None = None

    def __str__(self) -> str:
        if self.kind == "ssh":
            return f"ssh:{self.value}{f':{self.port}' if self.port else ''}:{self.pid}"
        return f"{self.kind}:{self.value}"


def parse_stop_target(text: str) -> StopTarget:
    kind, sep, rest = text.partition(":")
    if not sep or kind not in KINDS or not rest:
        raise UsageError(f"--stop {text!r}: use tmux:SESSION, pid:PID, ssh:HOST[:PORT]:PID or slurm:JOBID")
    if kind == "pid":
        return StopTarget("pid", rest, pid=_positive_int(rest, text))
    if kind == "slurm":
        if not rest.replace("_", "").isdigit():
            raise UsageError(f"--stop {text!r}: a Slurm job id is digits (array tasks: 123_4)")
        return StopTarget("slurm", rest)
    if kind == "ssh":
        host, sep, pid = rest.rpartition(":")
        if not sep or not host:
            raise UsageError(f"--stop {text!r}: use ssh:HOST:PID or ssh:HOST:PORT:PID")
        port = None
        head, sep, tail = host.rpartition(":")
        if sep and tail.isdigit():
            host, port = head, int(tail)
        return StopTarget("ssh", host, pid=_positive_int(pid, text), port=port)
    if any(ch in rest for ch in ":.") and kind == "tmux":
        raise UsageError(f"--stop {text!r}: a tmux session name cannot contain ':' or '.'")
    return StopTarget("tmux", rest)


def _positive_int(text: str, whole: str) -> int:
    if not text.isdigit() or int(text) <= 1:
        raise UsageError(f"--stop {whole!r}: {text!r} is not a process id")
    return int(text)


def stop_target(target: StopTarget, *, grace_s: float = 30.0, poll_s: float = 0.2) -> StopOutcome:
    if target.kind == "tmux":
        return stop_tmux_session(target.value, grace_s=grace_s, poll_s=poll_s)
    if target.kind == "pid":
        assert target.pid is not None
        return stop_process_group(target.pid, grace_s=grace_s, poll_s=poll_s)
    if target.kind == "ssh":
        return stop_remote_process(target, grace_s=grace_s)
    raise UsageError(f"{target} is stopped through the scheduler, not here")


def stop_with_command(command: str, target: StopTarget, *, grace_s: float, timeout_s: float = 60.0,
                      poll_s: float = 0.5) -> StopOutcome:
    """The user's stop command, then the check that the target is gone after the grace period; if it is
    not, the target is stopped the usual way (and that is said)."""
    try:
        result = run_command(shlex.split(command), timeout=timeout_s, check=False)
        ran = f"ran `{command}` (exit {result.returncode})"
    except (CommandError, ValueError) as exc:
        ran = f"stop command `{command}` failed: {exc}"
    deadline = time.monotonic() + grace_s
    alive = target_alive(target)
    while alive is not False and time.monotonic() < deadline:
        time.sleep(poll_s)
        alive = target_alive(target)
    if alive is False:
        return StopOutcome("stop_command", True, f"{ran}; {target} gone (checked)", "gone")
    outcome = stop_target(target, grace_s=grace_s)
    still = "could not be checked" if alive is None else f"still running {grace_s:g} s later"
    return StopOutcome(outcome.method, outcome.ok, f"{ran}; {target} {still}: {outcome.detail}", outcome.final_state)


# --- local processes -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    pgid: int
    uid: int
    zombie: bool


def process_table() -> dict[int, Proc]:
    table: dict[int, Proc] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fields = door.read_proc(f"/proc/{name}/stat").decode("utf-8", "replace").rsplit(")", 1)[1].split()
            uid = os.stat(f"/proc/{name}").st_uid
        except (OSError, IndexError):
            continue  # ended while we looked
        table[int(name)] = Proc(int(name), int(fields[1]), int(fields[2]), uid, fields[0] in ("Z", "X"))
    return table


def descendants(roots: set[int], table: dict[int, Proc]) -> set[int]:
    """roots and every process below them."""
    found = set(roots)
    changed = True
    while changed:
        changed = False
        for proc in table.values():
            if proc.ppid in found and proc.pid not in found:
                found.add(proc.pid)
                changed = True
    return found


def _alive(pids: set[int], table: dict[int, Proc]) -> set[int]:
    return {pid for pid in pids if pid in table and not table[pid].zombie}


def members_of(pid: int) -> set[int]:
    """The live processes a pid: target would signal now (empty when they are gone)."""
    try:
        members, _ = _members_fn(pid)
    except (ProcessLookupError, PermissionError):
        return set()
    return members()


def _members_fn(pid: int) -> tuple[Callable[[], set[int]], str]:
    """How to list the processes to stop, and what they are called. The group of pid, unless that is
    our own group (a watcher started from the same shell job): then pid and its descendants."""
    pgid = os.getpgid(pid)
    if pgid == os.getpgrp():
        tree = descendants({pid}, process_table())
        return (lambda: _alive(descendants({pid}, process_table()) | tree, process_table())), f"process {pid} and its children"
    return (lambda: {p.pid for p in process_table().values() if p.pgid == pgid and not p.zombie}), f"process group {pgid}"


def real_uid(pid: int) -> int | None:
    """The real uid of pid (/proc/PID/status; the folder's owner is root for a non-dumpable process)."""
    try:
        for line in door.read_proc(f"/proc/{pid}/status").decode("utf-8", "replace").splitlines():
            if line.startswith("Uid:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def _foreign(pids: set[int]) -> list[str]:
    me = os.getuid()
    owners = {pid: real_uid(pid) for pid in sorted(pids)}
    return [f"{pid} (uid {uid})" for pid, uid in owners.items() if uid is not None and uid != me]


def _wait_gone(members: Callable[[], set[int]], timeout_s: float, poll_s: float) -> tuple[bool, float]:
    start = time.monotonic()
    while True:
        if not members():
            return True, time.monotonic() - start
        if time.monotonic() - start >= timeout_s:
            return False, time.monotonic() - start
        time.sleep(poll_s)


def signal_until_gone(members: Callable[[], set[int]], what: str, *, grace_s: float, poll_s: float,
                      steps: list[str], first: signal.Signals = signal.SIGINT) -> str | None:
    """Signal the processes members() lists, escalating; the signal that ended them, or None."""
    sequence = [(signal.SIGINT, grace_s), (signal.SIGTERM, grace_s), (signal.SIGKILL, KILL_WAIT_S)]
    sequence = sequence[[s for s, _ in sequence].index(first):]
    sent = "nothing: already gone"
    for sig, wait_s in sequence:
        pids = members()
        if not pids:
            return sent
        if os.getpid() in pids:
            steps.append(f"refused: {what} includes this watcher (pid {os.getpid()})")
            return None
        foreign = _foreign(pids)
        if foreign:
            steps.append(f"refused: {what} has processes of another user: {', '.join(foreign)}")
            return None
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        steps.append(f"{sig.name} to {what} ({len(pids)} process(es))")
        sent = sig.name
        gone, waited = _wait_gone(members, wait_s, poll_s)
        if gone:
            steps.append(f"gone {waited:.1f} s after {sig.name}")
            return sig.name
    steps.append(f"{what} still alive after SIGKILL")
    return None


def stop_process_group(pid: int, *, grace_s: float = 30.0, poll_s: float = 0.2) -> StopOutcome:
    try:
        members, what = _members_fn(pid)
    except ProcessLookupError:
        return StopOutcome("pid", True, f"no process {pid} (it had already ended, or never ran)", "gone", found=False)
    except PermissionError:
        return StopOutcome("pid", False, f"process {pid} is not ours to signal: not stopped")
    steps: list[str] = []
    ended_by = signal_until_gone(members, what, grace_s=grace_s, poll_s=poll_s, steps=steps)
    return StopOutcome("pid", ended_by is not None, f"pid:{pid}: " + "; ".join(steps),
                       f"ended by {ended_by}" if ended_by else None)


# --- tmux ------------------------------------------------------------------------------------------

def _tmux(*words: str, check: bool = True, timeout: float = 15.0) -> str:
    return run_command(["tmux", *words], timeout=timeout, check=check).stdout


def tmux_session_exists(session: str) -> bool:
    try:
        return run_command(["tmux", "has-session", "-t", f"={session}"], timeout=15, check=False).returncode == 0
    except CommandError:
        return False  # no tmux at all


@dataclass
class _TmuxPanes:
    """The panes of a session to stop, and those of a watcher running inside it (left alone)."""

    session: str
    ours: set[str]  # panes this process runs under
    targets: list[tuple[str, int]]  # (pane id, pid of its shell) of every other pane
    tree: set[int]  # the targets' processes and their descendants, when the stop began

    @classmethod
    def listed(cls, session: str) -> _TmuxPanes:  # CommandError when tmux cannot list them
        panes = [line.split() for line in _tmux("list-panes", "-s", "-t", f"={session}", "-F",
                                                "#{pane_id} #{pane_pid}").splitlines() if line.strip()]
        table = process_table()
        ours = {pane for pane, pid in panes if os.getpid() in descendants({int(pid)}, table)}
        targets = [(pane, int(pid)) for pane, pid in panes if pane not in ours]
        return cls(session, ours, targets, descendants({pid for _, pid in targets}, table))

    def present(self) -> bool:  # the session (with a watcher inside: a target pane) is still there
        if not self.ours:
            return tmux_session_exists(self.session)
        try:
            listed = _tmux("list-panes", "-s", "-t", f"={self.session}", "-F", "#{pane_id}", check=False).split()
        except CommandError:
            return False
        return any(pane in listed for pane, _ in self.targets)

    def children(self) -> set[int]:  # the trainer under the panes' shells, while the panes last
        pane_pids = {pid for _, pid in self.targets}
        return _alive(descendants(pane_pids, process_table()) - pane_pids, process_table()) if self.present() else set()

    def survivors(self) -> set[int]:
        return _alive(self.tree, process_table())


def stop_tmux_session(session: str, *, grace_s: float = 30.0, poll_s: float = 0.2) -> StopOutcome:
    """C-c to the session's panes, the grace period, then kill-session. A watcher running inside the same
    session (another window) is left alone: then only the other panes are interrupted and killed."""
    steps: list[str] = []
    if not tmux_session_exists(session):
        return StopOutcome("tmux", True, f"tmux session {session} is not running (already ended)", "gone", found=False)
    try:
        panes = _TmuxPanes.listed(session)
    except CommandError as exc:
        return StopOutcome("tmux", False, f"tmux session {session}: cannot list its panes: {exc}")
    foreign = _foreign(panes.tree)
    if foreign:
        return StopOutcome("tmux", False, f"tmux session {session} runs processes of another user "
                           f"({', '.join(foreign)}): not stopped")
    if panes.ours:
        steps.append(f"this watcher runs in pane(s) {', '.join(sorted(panes.ours))} of the session: left alone")
    _interrupt_then_kill(panes, grace_s, poll_s, steps)
    gone, _ = _wait_gone(panes.survivors, 2.0, poll_s)
    if not gone:
        signal_until_gone(panes.survivors, f"the session's {len(panes.survivors())} leftover process(es)",
                          grace_s=min(grace_s, 5.0), poll_s=poll_s, steps=steps, first=signal.SIGTERM)
    exists = panes.present()
    left = panes.survivors()
    took = not exists and not left
    what = "panes" if panes.ours else "session"
    steps.append(f"{what} gone, no process of it left" if took else
                 f"NOT stopped: {what} {'still there' if exists else 'gone'}, {len(left)} process(es) left")
    return StopOutcome("tmux", took, f"tmux:{session}: " + "; ".join(steps), "gone" if took else None)


def _interrupt_then_kill(panes: _TmuxPanes, grace_s: float, poll_s: float, steps: list[str]) -> None:
    """C-c to the target panes, the grace, then kill-session (kill-pane with a watcher inside)."""
    try:
        for pane_id, _ in panes.targets:
            _tmux("send-keys", "-t", pane_id, "C-c", check=False)
        steps.append(f"C-c sent to {len(panes.targets)} pane(s) of tmux session {panes.session}")
        gone, waited = _wait_gone(panes.children, grace_s, poll_s)
        steps.append(f"the trainer exited {waited:.1f} s after the interrupt" if gone
                     else f"still running {grace_s:g} s after the interrupt")
        if panes.present() and not panes.ours:
            _tmux("kill-session", "-t", f"={panes.session}", check=False)
            steps.append(f"tmux kill-session -t {panes.session}")
        elif panes.present():
            for pane_id, _ in panes.targets:
                _tmux("kill-pane", "-t", pane_id, check=False)
            steps.append(f"tmux kill-pane on {len(panes.targets)} pane(s)")
    except CommandError as exc:
        steps.append(f"tmux failed: {exc}")


# --- ssh -------------------------------------------------------------------------------------------

# $1 pid, $2 grace (s); exit 0 stopped, 6 no such process, 3 refused (another user), 5 still alive
_REMOTE_SCRIPT = r"""
pid=$1; grace=$2; me=$(id -u)
pgid=$(ps -o pgid= -p "$pid" 2>/dev/null | tr -d ' ')
[ -n "$pgid" ] || { echo "no process $pid (it had already ended, or never ran)"; exit 6; }
others=$(ps -eo pgid=,uid= | awk -v g="$pgid" -v me="$me" '$1==g && $2!=me' | wc -l)
[ "$others" -eq 0 ] || { echo "refused: process group $pgid has processes of another user than uid $me"; exit 3; }
alive() { ps -eo pgid=,stat= | awk -v g="$pgid" '$1==g && $2 !~ /^Z/' | grep -q .; }
for step in INT:$grace TERM:$grace KILL:5; do
  sig=${step%%:*}; wait_s=${step#*:}
  alive || break
  kill -s "$sig" -- "-$pgid" 2>/dev/null
  printf 'SIG%s to process group %s on %s; ' "$sig" "$pgid" "$(hostname)"
  i=0; while alive && [ "$i" -lt $((wait_s * 5)) ]; do sleep 0.2; i=$((i + 1)); done
  alive || { echo "gone after SIG$sig"; exit 0; }
done
alive && { echo "still alive after SIGKILL"; exit 5; }
echo "gone"
"""


def ssh_base(host: str, port: int | None) -> list[str]:
    words = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10"]
    words += shlex.split(os.environ.get(SSH_OPTIONS_ENV, ""))
    if port:
        words += ["-p", str(port)]
    return [*words, host]


def stop_remote_process(target: StopTarget, *, grace_s: float = 30.0) -> StopOutcome:
    grace = max(1, round(grace_s))
    remote = shlex.join(["sh", "-c", _REMOTE_SCRIPT, "sh", str(target.pid), str(grace)])
    try:
        result = run_command([*ssh_base(target.value, target.port), remote], timeout=2 * grace + 60, check=False)
    except CommandError as exc:
        return StopOutcome("ssh", False, f"{target}: ssh failed: {exc}")
    text = (result.stdout.strip() or result.stderr.strip()).replace("\n", " ")
    if result.returncode == 6:
        return StopOutcome("ssh", True, f"{target}: {text}", "gone", found=False)
    took = result.returncode == 0
    return StopOutcome("ssh", took, f"{target}: {text}" + ("" if took else f" (exit {result.returncode})"),
                       "gone" if took else None)


def target_alive(target: StopTarget) -> bool | None:
    """Whether the target still runs; None when that cannot be told now (ssh unreachable)."""
    if target.kind == "tmux":
        return tmux_session_exists(target.value)
    if target.kind == "pid":
        assert target.pid is not None
        return bool(members_of(target.pid))
    if target.kind == "ssh":
        probe = f"kill -0 {target.pid} 2>/dev/null && echo alive || echo gone"
        try:
            result = run_command([*ssh_base(target.value, target.port), shlex.join(["sh", "-c", probe])],
                                 timeout=30, check=False)
        except CommandError:
            return None
        word = result.stdout.strip().splitlines()[-1:] if result.returncode == 0 else []
        return {"alive": True, "gone": False}.get(word[0]) if word else None
    return None
