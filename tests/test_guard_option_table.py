"""The guard options are declared once (sbatch/guard_options.py GUARD_TABLE): one row more is parsed, listed by
both usage texts and the user guide, taken by GuardedExecutor as a keyword and replayed by `restart`."""

from __future__ import annotations

import dataclasses
import io
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from guarded_sbatch.cli.kill_restart import restart_launch_argv
from guarded_sbatch.cli.main import main
from guarded_sbatch.core.errors import UsageError
from guarded_sbatch.records.registry import RunRecord
from guarded_sbatch.sbatch import guard_options
from guarded_sbatch.sbatch.argv import split_sbatch_argv
from guarded_sbatch.sbatch.guard_options import GUARD_TABLE, KINDS, GuardOption
from package_extras import guard_options_markdown

REPO = Path(__file__).resolve().parents[1]
PROBE = GuardOption("--guard-probe-budget", "probe_budget", "positive_int", "a probe's budget, in widgets", "N",
                    keyword="probe_budget")


@pytest.fixture
def one_more_option(monkeypatch: pytest.MonkeyPatch) -> None:
    """The table with one row more, and GuardOptions with its typed field: all an option needs."""
    wider = dataclasses.make_dataclass("GuardOptions", [("probe_budget", "int | None", dataclasses.field(default=None))],
                                       bases=(guard_options.GuardOptions,), frozen=True)
    monkeypatch.setattr(guard_options, "GuardOptions", wider)
    monkeypatch.setattr(guard_options, "GUARD_TABLE", (*GUARD_TABLE, PROBE))


def _help(argv: list[str]) -> str:
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(argv) == 0
    return out.getvalue()


def test_the_table_fills_every_field_of_guard_options_once() -> None:
    fields = [row.field for row in GUARD_TABLE]
    assert sorted(fields) == sorted(f.name for f in dataclasses.fields(guard_options.GuardOptions))
    for row in GUARD_TABLE:
        assert row.kind in KINDS and (row.metavar == "") == (row.kind == "flag"), row
        assert row.replay in ("given", "never") or row.replay.startswith("record:"), row
        assert row.choices or row.kind != "choice", row


@pytest.mark.usefixtures("one_more_option")
def test_a_new_row_is_parsed_and_checked() -> None:
    launch = split_sbatch_argv(["--guard-probe-budget", "7", "-p", "gpu", "train.sh"])
    assert getattr(launch.guard_options, "probe_budget") == 7 and launch.guard_words == ("--guard-probe-budget", "7")
    with pytest.raises(UsageError, match="--guard-probe-budget needs a positive int"):
        split_sbatch_argv(["--guard-probe-budget=-1", "train.sh"])


@pytest.mark.usefixtures("one_more_option")
def test_a_new_row_is_in_both_usage_texts() -> None:
    for argv in (["--help"], ["run", "--help"]):
        text = _help(argv)
        assert "--guard-probe-budget N" in text and "a probe's budget, in widgets" in text, argv
        assert all(row.flag in text for row in GUARD_TABLE), argv


@pytest.mark.usefixtures("one_more_option")
def test_a_new_row_is_an_executor_keyword(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from guarded_sbatch.launch.executor import GuardedExecutor, api_words

    monkeypatch.setenv("GUARDED_SBATCH_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)
    executor = GuardedExecutor(tmp_path / "logs", run_name="probe-mlp-bs8-lr1e-3", probe_budget=3, tb_dir="runs/x",
                               waivers={"eta": "known"}, cluster="debug")
    words = executor._argv(tmp_path / "x.sh")
    assert "--guard-probe-budget=3" in words and f"--guard-tb={tmp_path / 'runs' / 'x'}" in words
    assert "--guard-waive=eta=known" in words
    assert getattr(split_sbatch_argv(words).guard_options, "probe_budget") == 3
    assert api_words("give --guard-probe-budget N") == 'give probe_budget="N"'
    with pytest.raises(UsageError, match="--guard-probe-budget needs a positive int"):
        GuardedExecutor(tmp_path / "logs", probe_budget=0, cluster="debug")
    with pytest.raises(UsageError, match="no keyword probe_budgte=: did you mean probe_budget="):
        GuardedExecutor(tmp_path / "logs", probe_budgte=1, cluster="debug")


@pytest.mark.usefixtures("one_more_option")
def test_a_new_row_is_replayed_by_restart() -> None:
    record = RunRecord(run_id="r1", run_name="probe-mlp-bs8-lr1e-3", backend="local", job_id="12", script="train.sh",
                       guard_words=["--guard-probe-budget", "5", "--guard-tb=/p/tb", "--guard-waive=eta=old",
                                    "--guard-restart", "--guard-backend=slurm"])
    words = restart_launch_argv(record, ())
    assert "--guard-probe-budget=5" in words and "--guard-tb=/p/tb" in words and "--guard-waive=eta=old" in words
    assert "--guard-backend=local" in words and "--guard-backend=slurm" not in words  # what the launch settled on
    assert words.count("--guard-restart") == 1
    again = restart_launch_argv(record, ("--guard-probe-budget=9", "--guard-waive", "eta=new"))
    assert "--guard-probe-budget=5" not in again and "--guard-waive=eta=old" not in again
    parsed = split_sbatch_argv(again).guard_options
    assert getattr(parsed, "probe_budget") == 9 and [w.reason for w in parsed.waivers] == ["new"]


def test_the_user_guide_lists_every_option_as_the_table_says() -> None:
    guide = (REPO / "docs" / "user-guide.md").read_text(encoding="utf-8")
    assert guard_options_markdown() in guide, "docs/user-guide.md's guard option table is not the table's: regenerate it " \
        "with tests/package_extras.py guard_options_markdown()"
