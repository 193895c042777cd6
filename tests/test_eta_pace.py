"""The pace of a run from the timestamps on its step lines, whatever their format and place on the line."""

from __future__ import annotations

import pytest

from guarded_sbatch.launch.checks.eta_pace import seconds_per_step_from_stamps

CASES = {
    "date first": "".join(f"2026-03-02 14:{m:02d}:00,120 INFO step {m * 10} loss 1.2\n" for m in range(5)),
    "clock in brackets": "".join(f"[14:{m:02d}:30] iter {m * 10}/500 loss 1\n" for m in range(5)),
    "json": "".join(f'{{"step": {m * 10}, "time": "2026-03-02T14:{m:02d}:00"}}\n' for m in range(5)),
    "unix time": "".join(f"step={m * 10} loss=1.0 time={1772460067 + 60 * m}.25\n" for m in range(5)),
    "progress": "".join(f"2026-03-02 14:{m:02d}:00 [{m * 10}/500] loss 1\n" for m in range(5)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_stamp_format_gives_six_seconds_a_step(name: str) -> None:
    assert seconds_per_step_from_stamps(CASES[name]) == (6.0, 0, 40)


def test_a_clock_without_a_date_passes_midnight() -> None:
    text = "".join(f"step {m * 10} | loss 2.3 | 23:5{m}:00\n" for m in range(5)) + "step 50 | loss 2 | 00:00:00\n"
    assert seconds_per_step_from_stamps(text) == (12.0, 0, 50)


def test_a_resumed_run_is_timed_on_its_last_stretch() -> None:
    text = "".join(f"2026-03-02 14:{m:02d}:00 step {m * 10}\n" for m in range(5))
    text += "".join(f"2026-03-02 15:{m:02d}:00 step {m * 20}\n" for m in range(4))
    assert seconds_per_step_from_stamps(text) == (3.0, 0, 60)


def test_lines_without_stamps_or_steps_give_nothing() -> None:
    assert seconds_per_step_from_stamps("step 10 loss 1\nstep 20 loss 1\n") is None
    assert seconds_per_step_from_stamps("14:00:00 epoch 1\n14:05:00 epoch 2\n") is None
