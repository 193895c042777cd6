"""Generate the labelled corpus, read it back from its TensorBoard files with the real reader, replay
each run as the sidecar would (a check every 20 steps) and score the judge against the labels."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from package_extras import history_read
from guarded_sbatch.judge import Decision, MetricHistory, decide
from guarded_sbatch.sources.tensorboard import TensorBoardSource

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "corpus"))
import generate as corpus
from corpus_cache import corpus_runs
from corpus_replay import replay

CHECK_EVERY_STEPS = 20
HEALTHY = [name for name, spec in corpus.CORPUS.items() if spec.healthy]
BROKEN = [name for name, spec in corpus.CORPUS.items() if not spec.healthy]


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, corpus.RunLabels]:
    return corpus_runs(tmp_path_factory)


def test_every_run_is_generated_with_its_files(generated: dict[str, corpus.RunLabels]) -> None:
    for labels in generated.values():
        assert list(Path(labels.tensorboard_dir).glob("events.out.tfevents.*"))
        assert Path(labels.text_log).stat().st_size > 0
        assert (Path(labels.tensorboard_dir).parent / "labels.json").is_file()


@pytest.mark.parametrize("name", HEALTHY)
def test_healthy_runs_are_never_stopped(generated: dict[str, corpus.RunLabels], name: str) -> None:
    points = TensorBoardSource(generated[name].tensorboard_dir).read_new()
    stop_step, verdict = replay(points)
    assert stop_step is None, f"{name}: false STOP at step {stop_step}: {verdict.message}"
    assert verdict.decision is Decision.CONTINUE


@pytest.mark.parametrize("name", BROKEN)
def test_broken_runs_are_stopped_soon_after_onset_for_the_right_reason(
    generated: dict[str, corpus.RunLabels], name: str
) -> None:
    labels = generated[name]
    assert labels.onset_step is not None and labels.stop_within_steps is not None
    points = TensorBoardSource(labels.tensorboard_dir).read_new()
    stop_step, verdict = replay(points)
    assert stop_step is not None, f"{name}: never stopped (last: {verdict.message})"
    assert stop_step >= labels.onset_step, f"{name}: STOP at {stop_step} before the fault at {labels.onset_step}"
    deadline = labels.onset_step + labels.stop_within_steps + CHECK_EVERY_STEPS
    assert stop_step <= deadline, f"{name}: STOP at {stop_step}, later than {deadline}"
    assert verdict.reason.value in labels.reasons, f"{name}: reason {verdict.reason.value}"
    assert verdict.anomalies, "a STOP names its anomalies"


def test_warmup_spike_is_reported_as_recovered(generated: dict[str, corpus.RunLabels]) -> None:
    points = TensorBoardSource(generated["warmup_spike"].tensorboard_dir).read_new()
    verdict = decide(MetricHistory.from_points(points))
    assert verdict.decision is Decision.CONTINUE
    assert any(a.kind == "recovered_spike" and 55 <= a.step <= 70 for a in verdict.anomalies)


def test_fp16_run_really_overflowed(generated: dict[str, corpus.RunLabels]) -> None:
    history = history_read(TensorBoardSource(generated["fp16_overflow"].tensorboard_dir))
    _, skipped = history.series("train/skipped_steps")
    _, scale = history.series("train/loss_scale")
    assert skipped[-1] >= 5  # real float16 overflows happened and were skipped
    assert len(set(scale.tolist())) >= 3  # and the scale moved both ways
