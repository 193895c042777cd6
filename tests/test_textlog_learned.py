"""The log's own structure, learned (sources/textlog_shapes.py, textlog_learned.py): a format no reader was shown is
read from its repeated lines, its slots named by the line itself, its step axis the slot that rises by a steady
stride (never an ETA, a duration or a file:line), and a line printed once never moves the axis nor feeds a series."""

from __future__ import annotations

import json
import math
from pathlib import Path

from cli_runner import run_cli
from guarded_sbatch.sources.kind_textlog import KIND
from guarded_sbatch.sources.textlog import TextLogSource
from guarded_sbatch.sources.textlog_learned import WARNINGS_KEY


def _series(points) -> dict[str, list[tuple[int, float]]]:
    found: dict[str, list[tuple[int, float]]] = {}
    for p in points:
        found.setdefault(p.key, []).append((p.step, p.value))
    return found


def _invented(nan_from: int | None = None, lines: int = 30) -> str:
    """A format made up for this test (no tool's): `<<it 00120>> objective≈2.41 | aux 0.2 | took 0.31s | eta 00:12:01`."""
    out = []
    for i in range(1, lines + 1):
        objective = "nan" if nan_from is not None and i >= nan_from else f"{3.0 - i * 0.03:.3f}"
        out.append(f"<<it {i * 10:05d}>> objective≈{objective} | aux {0.2 + i * 0.001:.3f} | took 0.{30 + i % 7}s"
                   f" | eta 00:{(40 - i) % 60:02d}:01")
    return "\n".join(out) + "\n"


def _monitor(log: Path, *extra: str) -> dict:
    result = run_cli(["monitor", "--once", "--json", "--log", str(log), *extra])
    return json.loads(result.stdout)


def test_an_invented_format_is_read_named_and_its_step_axis_found(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text(_invented())
    series = _series(TextLogSource(log).read_new())
    assert [s for s, _ in series["objective"]] == list(range(10, 310, 10))
    assert series["objective"][0] == (10, 2.97)
    assert "aux" in series
    assert not any(key.startswith("eta") or key == "it" for key in series)  # the ETA is no series, the step no series


def test_a_nan_in_an_invented_format_stops_the_run(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text(_invented(nan_from=28))
    assert _monitor(log, "--train-loss-key", "objective")["decision"] == "STOP"
    assert _monitor(log)["decision"] == "STOP"  # the judge chooses the objective by itself


def test_key_colon_value_lines(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("".join(f"step: {i * 5}\nloss: {2 - i * 0.1:.2f}\n" for i in range(1, 6)))
    series = _series(TextLogSource(log).read_new())
    assert series["loss"] == [(5, 1.9), (10, 1.8), (15, 1.7), (20, 1.6), (25, 1.5)]


def test_bare_index_value_lines(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("Loading from checkpoint\n" + "".join(f"{76900 + i * 10} {2.6 - i * 0.01:.4f}\n" for i in range(6))
                   + "76960 nan\n")
    series = _series(TextLogSource(log).read_new())
    assert [s for s, _ in series["value"]] == [76900 + i * 10 for i in range(7)]
    assert math.isnan(series["value"][-1][1])


def test_a_csv_handed_as_the_log_is_read_as_csv(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("epoch,iter,loss,acc\n0,10,2.3,0.1\n0,20,2.1,0.2\n0,30,nan,0.2\n")
    source = KIND.open(log)
    series = _series(source.read_new())
    assert series["loss"][:2] == [(10, 2.3), (20, 2.1)] and math.isnan(series["loss"][2][1])


def test_one_letter_table_columns(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("".join(f"[{i}/100] B: {1.2 - i * 0.01:.2f} | C: {3.4 - i * 0.01:.2f} | T: 5.6\n" for i in range(1, 6)))
    series = _series(TextLogSource(log).read_new())
    assert {"B", "C", "T"} <= set(series)
    assert [s for s, _ in series["B"]] == [1, 2, 3, 4, 5]


def test_an_eta_or_a_file_line_is_never_the_step(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    body = []
    for i in range(1, 8):
        body.append(f"remaining {1000 - i * 10} batches | loss {2 - i * 0.05:.3f} | took {i % 3 + 1}s")
        if i == 4:
            body.append("train.py:123: UserWarning: something happened 7 times")
    log.write_text("\n".join(body) + "\n")
    series = _series(TextLogSource(log).read_new())
    steps = [s for s, _ in series["loss"]]
    assert steps == sorted(steps) and 123 not in steps and max(steps) < 100  # not the countdown, not the line number
    assert "remaining" not in series


def test_a_dataset_sample_printed_once_never_moves_the_step_nor_stops(tmp_path: Path) -> None:
    """Issue 42: data that prints itself into the log (`{'loss': nan, ..., 'step': 1000000}`)."""
    log = tmp_path / "train.log"
    lines = [f"step {i * 10} loss {2.5 - i * 0.01:.3f} lr 0.001" for i in range(1, 41)]
    lines.insert(20, "{'text': 'a sample', 'loss': nan, 'label': 3, 'step': 1000000}")
    log.write_text("\n".join(lines) + "\n")
    points = TextLogSource(log).read_new()
    assert max(p.step for p in points) == 400
    assert all(math.isfinite(p.value) for p in points)
    assert _monitor(log)["decision"] != "STOP"


def test_a_log_written_in_pieces_yields_each_point_once(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    text = _invented(lines=12)
    source = TextLogSource(log)
    points = []
    log.write_text("")
    for cut in range(0, len(text), 37):  # pieces that tear lines anywhere
        with log.open("a") as handle:
            handle.write(text[cut : cut + 37])
        points += source.read_new()
    objective = [(p.step, p.value) for p in points if p.key == "objective"]
    # from the shape's third line on (when it has repeated), every line once, at its own step; the first two lines
    # of a stream that ends after each of them are read by the known formats alone (at the log's first steps)
    assert objective == [(i * 10, round(3.0 - i * 0.03, 3)) for i in range(3, 13)]
    aux = [(p.step, p.value) for p in points if p.key == "aux"]
    assert len(aux) == len({step for step, _ in aux}) == 12


def test_a_library_nan_warning_is_counted_and_a_cuda_assert_is_a_crash(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("".join(f"iter {i} loss {2 - i * 0.01:.2f}\n" for i in range(1, 6))
                   + "Warning: NaN or Inf found in input tensor.\n" * 2
                   + "RuntimeError: cuda runtime error (59) : device-side assert triggered at THCTensor.cu:26\n")
    source = TextLogSource(log)
    series = _series(source.read_new())
    assert series[WARNINGS_KEY] == [(5, 2.0)]  # two warnings at step 5: the count there is 2
    assert [c.exception for c in source.take_crashes()][0].startswith("CUDA error")


def test_a_word_that_varies_between_lines_of_one_shape_is_no_slot(tmp_path: Path) -> None:
    """Tokens that differ between lines of one template become wildcards; numbers inside them have no fixed text."""
    log = tmp_path / "train.log"
    words = ["alpha", "b3ta", "g4mma-7", "delta", "eps1lon2", "zeta"]
    log.write_text("".join(f"run {w} step {i} loss {2 - i * 0.1:.2f}\n" for i, w in enumerate(words, start=1)))
    series = _series(TextLogSource(log).read_new())
    assert [s for s, _ in series["loss"]] == [1, 2, 3, 4, 5, 6]


def test_a_line_labelled_val_is_an_evaluation_never_the_training_series(tmp_path: Path) -> None:
    """rat-sql#11: `Step N stats, train: loss = X` and `Step N stats, val: loss = Y` at the same step: the val line
    is an evaluation (eval/loss), never written over the training loss."""
    log = tmp_path / "train.log"
    log.write_text("".join(f"[2020-07-29T13:59:21] Step {s} stats, train: loss = {t}\n"
                           f"[2020-07-29T13:59:27] Step {s} stats, val: loss = {v}\n"
                           for s, t, v in ((14100, 1.13, 3.32), (14200, 0.92, 3.54), (14300, 2.30, 4.65))))
    points = TextLogSource(log).read_new()
    by_key = {(p.key, p.step): p.value for p in points}
    assert by_key[("loss", 14200)] == 0.92 and by_key[("eval/loss", 14200)] == 3.54
