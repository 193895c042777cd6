"""The same decision whether the run is read from its TensorBoard files, its W&B offline log or its
text log (each through the project's real reader)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from guarded_sbatch.judge import Decision, MetricHistory, decide
from guarded_sbatch.sources.tensorboard import TensorBoardSource
from guarded_sbatch.sources.textlog import TextLogSource
from guarded_sbatch.sources.wandb_log import WandbLogSource

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "corpus"))
import generate as corpus  # noqa: E402
from corpus_replay import replay  # noqa: E402





WITH_WANDB = ("healthy", "nan_lr", "fp16_scale_collapse")  # wandb is slow to start: only a few


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, corpus.RunLabels]:
    out = tmp_path_factory.mktemp("corpus-sources")
    return {name: corpus.generate_run(name, out, wandb=name in WITH_WANDB) for name in corpus.CORPUS}


@pytest.mark.parametrize("name", list(corpus.CORPUS))
def test_tensorboard_and_text_log_give_the_same_decision(generated: dict[str, corpus.RunLabels], name: str) -> None:
    labels = generated[name]
    from_tb = decide(MetricHistory.from_points(TensorBoardSource(labels.tensorboard_dir).read_new()))
    text_points = TextLogSource(labels.text_log).read_new()
    assert text_points, f"no points parsed from {labels.text_log}"
    from_text = decide(MetricHistory.from_points(text_points))
    assert (from_text.decision, from_text.reason) == (from_tb.decision, from_tb.reason), (
        f"{name}: TensorBoard says {from_tb.message!r}, the {labels.text_format} log says {from_text.message!r}")
    if labels.text_format != "hf":  # HF console dicts carry no step: the reader numbers them 1, 2, 3, ...
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
