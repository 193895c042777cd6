"""The same decision whether the run is read from its TensorBoard files, its W&B offline log or its
text log (each through the project's real reader): at the end, and at every checkpoint a sidecar
would judge (every CHECK_EVERY steps as the run grows), for every run of the corpus."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from package_extras import history_read
from guarded_sbatch.sources.points import Axis, MetricPoint
from guarded_sbatch.judge import Decision, MetricHistory, decide
from guarded_sbatch.sources.tensorboard import TensorBoardSource
from guarded_sbatch.sources.textlog import TextLogSource
from guarded_sbatch.sources.wandb_log import WandbLogSource

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "corpus"))
import generate as corpus
from corpus_cache import corpus_runs
from corpus_replay import replay

WITH_WANDB = tuple(corpus.CORPUS)  # every run, so every checkpoint is compared across all three
CHECK_EVERY = 20


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, corpus.RunLabels]:
    return corpus_runs(tmp_path_factory, wandb=WITH_WANDB)


def decisions_at_checkpoints(points: list[MetricPoint], last_step: int) -> list[tuple[int, str, str]]:
    """(checkpoint, decision, reason) at every CHECK_EVERY steps, the history grown to that step."""
    ordered = sorted(points, key=lambda p: p.step)
    history = MetricHistory()
    index = 0
    out = []
    for cut in range(CHECK_EVERY, last_step + CHECK_EVERY, CHECK_EVERY):
        chunk = []
        while index < len(ordered) and ordered[index].step <= cut:
            chunk.append(ordered[index])
            index += 1
        history.add(chunk)
        verdict = decide(history)
        out.append((cut, verdict.decision.value, verdict.reason.value))
    return out


def _three_sources(labels: corpus.RunLabels) -> dict[str, list[MetricPoint]]:
    assert labels.wandb_dir is not None
    return {
        "tensorboard": TensorBoardSource(labels.tensorboard_dir).read_new(),
        "wandb": WandbLogSource(labels.wandb_dir).read_new(),
        "text": TextLogSource(labels.text_log).read_new(),
    }


@pytest.fixture(scope="module")
def timelines(generated: dict[str, corpus.RunLabels]) -> dict[str, dict[str, list[tuple[int, str, str]]]]:
    """Per run, per source: the decision at every checkpoint (computed once for the tests below)."""
    out = {}
    for name, labels in generated.items():
        sources = _three_sources(labels)
        assert all(sources.values()), {k: len(v) for k, v in sources.items()}
        out[name] = {kind: decisions_at_checkpoints(points, labels.last_step) for kind, points in sources.items()}
    return out


def _differences(timelines: dict[str, list[tuple[int, str, str]]], kind: str) -> list[tuple[tuple[int, str, str], ...]]:
    return [(tb, other) for tb, other in zip(timelines["tensorboard"], timelines[kind], strict=True) if tb != other]


@pytest.mark.parametrize("name", list(corpus.CORPUS))
def test_wandb_gives_tensorboards_decision_at_every_checkpoint(
        timelines: dict[str, dict[str, list[tuple[int, str, str]]]], name: str) -> None:
    differ = _differences(timelines[name], "wandb")
    assert not differ, f"{name}: W&B differs from TensorBoard at {len(differ)} checkpoints, first {differ[:3]}"


@pytest.mark.parametrize("name", list(corpus.CORPUS))
def test_text_log_gives_tensorboards_decision_at_every_checkpoint(
        timelines: dict[str, dict[str, list[tuple[int, str, str]]]], name: str) -> None:
    differ = _differences(timelines[name], "text")
    assert not differ, f"{name}: the text log differs from TensorBoard at {len(differ)} checkpoints, first {differ[:3]}"


@pytest.mark.parametrize("name", list(corpus.CORPUS))
def test_wandb_gives_the_same_points_as_tensorboard(generated: dict[str, corpus.RunLabels], name: str) -> None:
    labels = generated[name]
    assert labels.wandb_dir is not None
    source = WandbLogSource(labels.wandb_dir)
    from_wandb = {(p.key, p.step): p.value for p in source.read_new()}
    from_tb = {(p.key, p.step): p.value for p in TensorBoardSource(labels.tensorboard_dir).read_new()}
    assert from_wandb.keys() == from_tb.keys()
    for key, value in from_tb.items():  # TensorBoard stores float32 (1.6e67 is inf there), W&B the double
        with np.errstate(over="ignore"):
            other = float(np.float32(from_wandb[key]))
        assert (value != value and other != other) or value == other, (key, value, from_wandb[key])
    if corpus.CORPUS[name].train.log_every > 1:  # log(step=...) skipping values: the user's steps, not calls
        assert set(source.axes().values()) == {Axis.STEP}


@pytest.mark.parametrize("name", list(corpus.CORPUS))
def test_tensorboard_and_text_log_give_the_same_decision(generated: dict[str, corpus.RunLabels], name: str) -> None:
    labels = generated[name]
    from_tb = decide(history_read(TensorBoardSource(labels.tensorboard_dir)))
    text_points = TextLogSource(labels.text_log).read_new()
    assert text_points, f"no points parsed from {labels.text_log}"
    from_text = decide(MetricHistory.from_points(text_points))
    assert (from_text.decision, from_text.reason) == (from_tb.decision, from_tb.reason), (
        f"{name}: TensorBoard says {from_tb.message!r}, the {labels.text_format} log says {from_text.message!r}")
    tb_stop, _ = replay(TensorBoardSource(labels.tensorboard_dir).read_new())
    text_stop, _ = replay(text_points)
    assert tb_stop == text_stop, f"{name}: first STOP at {tb_stop} from TensorBoard, {text_stop} from text"


@pytest.mark.parametrize("name", WITH_WANDB)
def test_wandb_offline_log_gives_the_same_decision(generated: dict[str, corpus.RunLabels], name: str) -> None:
    labels = generated[name]
    assert labels.wandb_dir is not None
    wandb_points = WandbLogSource(labels.wandb_dir).read_new()
    assert wandb_points, f"no history read from {labels.wandb_dir}"
    tb_points = TensorBoardSource(labels.tensorboard_dir).read_new()
    from_wandb, from_tb = decide(MetricHistory.from_points(wandb_points)), decide(MetricHistory.from_points(tb_points))
    assert (from_wandb.decision, from_wandb.reason) == (from_tb.decision, from_tb.reason)
    assert replay(wandb_points)[0] == replay(tb_points)[0]
    assert (from_tb.decision is Decision.CONTINUE) == corpus.CORPUS[name].healthy
