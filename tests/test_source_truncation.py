"""Reads while the writer is still writing: files from the real writers cut at every byte offset.

A cut file never crashes a reader, never yields a value the complete file does not have, and a reader
that follows the file as it grows ends with exactly the complete file's points.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from source_writers import tb_event, write_tb_events, write_wandb_offline_run
from test_sources_textlog import TRAINER_LINES

from guarded_sbatch.sources.points import MetricPoint
from guarded_sbatch.sources.tensorboard import TensorBoardSource
from guarded_sbatch.sources.textlog import TextLogSource
from guarded_sbatch.sources.wandb_log import WandbLogSource, find_wandb_file


def _as_map(points: list[MetricPoint]) -> dict[tuple[str, int], float]:
    return {(p.key, p.step): p.value for p in points}


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def _check_cuts(full: bytes, target: Path, make_source, fresh_every: int = 1) -> None:  # type: ignore[no-untyped-def]
    target.write_bytes(full)
    complete = _as_map(make_source(target).read_new())
    assert complete
    follower_target = target.with_name("follow-" + target.name)
    follower_target.write_bytes(b"")
    follower = make_source(follower_target)
    followed: list[MetricPoint] = []
    target.write_bytes(b"")
    written = 0
    # both files grow as a writer's do, a byte at a time (unbuffered: each read sees every byte written before it)
    with follower_target.open("ab", buffering=0) as growing, target.open("ab", buffering=0) as cut_copy:
        for cut in range(len(full) + 1):
            growing.write(full[cut - 1 : cut] if cut else b"")
            followed += follower.read_new()
            if cut % fresh_every == 0 or cut == len(full):
                cut_copy.write(full[written:cut])
                written = cut
                for key, value in _as_map(make_source(target).read_new()).items():
                    assert key in complete and _same(value, complete[key]), (cut, key, value)
    followed_map = _as_map(followed)
    assert followed_map.keys() == complete.keys()
    assert all(_same(followed_map[k], complete[k]) for k in complete)
    assert getattr(follower, "bad_records", 0) == 0


def test_tensorboard_file_cut_at_every_byte(tmp_path: Path) -> None:
    events = []
    for step, kind in enumerate(["simple", "float_val", "double_val", "tensor_content", "simple"] * 2):
        events.append(tb_event(step * 70, f"train/{kind}", math.nan if step == 3 else step / 7, kind))
    event_file = write_tb_events(tmp_path / "src", events)
    _check_cuts(event_file.read_bytes(), tmp_path / "events.out.tfevents.1.host", TensorBoardSource)


def test_text_log_cut_at_every_byte(tmp_path: Path) -> None:
    # One real trainer's lines each (no two of them log the same key at the same step).
    text = "".join(TRAINER_LINES[i][0] + "\n" for i in (0, 1, 2, 3, 4, 5, 15, 16))
    # the second HF dict takes its training bar's step (2); the first, with no bar before it, is the 1st dict
    text += "[batch=5/10]:\n\tTrain loss/train/total: 2.5\r\n 20%|██ | 2/10 [00:01<00:09]\r{'loss': 1.5, 'epoch': 0.2}\n"
    _check_cuts(text.encode("utf-8"), tmp_path / "slurm-1.out", TextLogSource)


@pytest.fixture(scope="module")
def wandb_log_bytes(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    log = find_wandb_file(write_wandb_offline_run(tmp_path_factory.mktemp("wandb-cut")))
    assert log is not None
    return log.read_bytes()


def test_wandb_log_cut_at_every_byte(tmp_path: Path, wandb_log_bytes: bytes) -> None:
    # The follower sees every offset; fresh readers every 31 bytes keep the test to a few seconds.
    _check_cuts(wandb_log_bytes, tmp_path / "run-abc.wandb", WandbLogSource, fresh_every=31)
