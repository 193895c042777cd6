"""Every wait says so (issue 36): core/waiting.Waiting writes a first line within 2 s, then progress once the wait
lasts 5 s, at growing gaps; the lines carry the time so far and what the waiting code knows now."""

from __future__ import annotations

import io
import time

import pytest

from guarded_sbatch.core.waiting import Waiting, elapsed_text, fit, tell


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _lines(stream: io.StringIO) -> list[str]:
    return stream.getvalue().splitlines()


def test_a_wait_says_so_within_2_s_then_shows_progress_at_growing_gaps() -> None:
    clock, out = Clock(), io.StringIO()
    wait = Waiting("job 7 to end", stream=out, clock=clock)
    said_at: dict[float, int] = {}
    for tenth in range(0, 1300):  # 130 s, ticked every 0.1 s as the thread does (every 0.25 s)
        clock.now = 100.0 + tenth / 10
        wait.detail = f"RUNNING at {tenth // 10} s"
        wait.tick()
        said_at.setdefault(len(_lines(out)), tenth / 10)
    lines = _lines(out)
    assert lines[0] == "guarded-sbatch: waiting for job 7 to end"
    assert said_at[1] <= 2.0  # the first line within 2 s
    assert said_at[2] == 5.0 and lines[1] == "guarded-sbatch: still waiting for job 7 to end (5 s so far): RUNNING at 5 s"
    progress = [at for count, at in sorted(said_at.items()) if count >= 2]
    assert progress == [5.0, 10.0, 20.0, 40.0, 80.0]  # doubling gaps, never more than a minute apart
    assert wait.lines == 5


def test_a_caller_that_said_it_gets_progress_only_and_quiet_says_nothing() -> None:
    clock, out = Clock(), io.StringIO()
    wait = Waiting("the cancel to take", said=True, stream=out, clock=clock)
    clock.now += 3
    wait.tick()
    assert _lines(out) == []
    clock.now += 3
    wait.tick()
    assert _lines(out) == ["guarded-sbatch: still waiting for the cancel to take (6 s so far)"]
    quiet = Waiting("x", quiet=True, stream=out, clock=clock)
    clock.now += 100
    quiet.tick()
    assert len(_lines(out)) == 1


def test_around_one_blocking_call_a_thread_tells_the_wait_and_stops_with_it() -> None:
    out = io.StringIO()
    with Waiting("squeue to answer", stream=out, first_s=0.1, progress_s=0.5, max_gap_s=0.5) as wait:
        wait.detail = "asked once"
        time.sleep(1.4)  # the blocking call
    written = _lines(out)
    assert written[0] == "guarded-sbatch: waiting for squeue to answer"
    assert written[1].startswith("guarded-sbatch: still waiting for squeue to answer (") and written[1].endswith(
        ": asked once")
    time.sleep(0.6)
    assert _lines(out) == written  # nothing after the wait ended


def test_the_time_so_far_reads_as_a_person_says_it() -> None:
    assert [elapsed_text(s) for s in (0.4, 59.9, 65, 3599, 3725)] == ["0 s", "59 s", "1 min 05 s", "59 min 59 s",
                                                                       "1 h 02 min"]


def test_a_message_fits_the_terminal_and_keeps_a_run_name_whole() -> None:
    name = "synthetic-tanh-mlp-bs64-lr15-diverging-3171"
    line = (f"guarded-sbatch: sidecar job 3172 watches job 3171; run folder /work/main/demo-out/.guarded-sbatch/runs/"
            f"{name}/sidecar-3172.out")
    for width in (40, 80, 120):
        lines = fit(line, width).splitlines()
        assert all(len(text) <= width for text in lines), (width, lines)
        assert width < len(name) + 4 or any(name in text for text in lines)  # cut after a slash, not in the name
        assert "".join(text.strip() for text in lines).replace(" ", "") == line.replace(" ", "")  # nothing lost
    assert fit("short", 80) == "short" and fit(line, None) == line
    assert fit("  - Reason: " + "word " * 30, 40).splitlines()[1].startswith("    word")  # the rest indented 2 more


def test_tell_wraps_on_a_terminal_only(monkeypatch: pytest.MonkeyPatch) -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setenv("COLUMNS", "50")
    text = "guarded-sbatch: " + "a long message " * 10
    tty, pipe = Tty(), io.StringIO()
    tell(text, tty)
    tell(text, pipe)
    assert max(len(line) for line in tty.getvalue().splitlines()) <= 50 < len(pipe.getvalue().splitlines()[0])


def test_a_shown_command_is_never_split_and_two_columns_hang_under_the_second() -> None:
    from guarded_sbatch.core.waiting import hanging

    path = "/scratch/users/someone/projects/coco/runs/synthetic-tanh-mlp-bs64-lr5e-2-seed1/slurm-123456.out"
    line = f"guarded-sbatch: its output goes to {path} (follow it: `tail -f {path}`); `guarded-sbatch status` lists it"
    lines = fit(line, 80).splitlines()
    assert [text for text in lines if f"`tail -f {path}`" in text], lines  # whole, on one line of its own
    assert all(len(text) <= 80 for text in lines if "`tail -f" not in text), lines
    assert "".join(text.strip() for text in lines).replace(" ", "") == line.replace(" ", "")  # nothing lost
    option = hanging("  --guard-loss-key KEY", "the logged series the sidecar judges as the training loss, when it "
                     "cannot tell (an UNGUARDED run names it)", 31, 80).splitlines()
    assert len(option) > 1 and all(len(text) <= 80 for text in option)
    assert option[0].index(" the ") + 1 == 31 and all(t.startswith(" " * 31) and t[31] != " " for t in option[1:])
