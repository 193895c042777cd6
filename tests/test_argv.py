"""split_sbatch_argv: our options, sbatch's options (as sbatch's getopt reads them), the script, its args."""

from __future__ import annotations

from pathlib import Path

import pytest

from guarded_sbatch.core.errors import UsageError
from guarded_sbatch.sbatch.argv import Waiver, parse_sbatch_words, split_sbatch_argv


def test_plain_sbatch_line_separate_values() -> None:
    argv = ["-p", "gpu", "--time", "1:00:00", "-J", "coco-r50-bs256", "-o", "logs/%j.out", "train.sh", "--lr", "3e-4"]
    launch = split_sbatch_argv(argv)
    assert launch.sbatch_options == ("-p", "gpu", "--time", "1:00:00", "-J", "coco-r50-bs256", "-o", "logs/%j.out")
    assert launch.script == Path("train.sh")
    assert launch.script_args == ("--lr", "3e-4")
    names = {o.name: o.value for o in launch.parsed_options}
    assert names == {"partition": "gpu", "time": "1:00:00", "job-name": "coco-r50-bs256", "output": "logs/%j.out"}


# The brief's list had W too, but in sbatch 22.05 -W is --wait, a flag (tested below).
@pytest.mark.parametrize("letter", list("AabcDdeiJLMmNnopqStwxBCFG"))
def test_every_short_option_with_a_value_takes_the_next_word(letter: str) -> None:
    launch = split_sbatch_argv([f"-{letter}", "VALUE", "job.sh"])
    assert launch.script == Path("job.sh")
    assert launch.sbatch_options == (f"-{letter}", "VALUE")
    assert launch.parsed_options[0].value == "VALUE"


def test_flags_do_not_take_the_next_word() -> None:
    for flag in ["-W", "-H", "-O", "-s", "-Q", "-v", "-k", "--parsable", "--test-only", "--requeue"]:
        launch = split_sbatch_argv([flag, "job.sh", "arg"])
        assert launch.script == Path("job.sh"), flag
        assert launch.script_args == ("arg",)


def test_attached_values_clusters_and_prefixes() -> None:
    launch = split_sbatch_argv(["-pgpu", "-N2", "--ntasks-per-node=4", "-Hv", "--part", "debug", "--exclusive", "run.sh"])
    values = [(o.name, o.value) for o in launch.parsed_options]
    assert values == [
        ("partition", "gpu"),
        ("nodes", "2"),
        ("ntasks-per-node", "4"),
        ("hold", None),
        ("verbose", None),
        ("partition", "debug"),
        ("exclusive", None),
    ]
    # --exclusive takes an optional value: the next word is the script, not its value
    assert launch.script == Path("run.sh")


def test_cluster_ending_in_option_with_separate_value() -> None:
    launch = split_sbatch_argv(["-Hp", "gpu", "run.sh", "-p", "x"])
    assert [(o.name, o.value) for o in launch.parsed_options] == [("hold", None), ("partition", "gpu")]
    assert launch.sbatch_options == ("-Hp", "gpu")
    assert launch.script_args == ("-p", "x")


def test_guard_options_before_and_among_sbatch_options_never_after_the_script() -> None:
    argv = [
        "--guard-waive",
        'config-diff="no reference exists yet: first run of this model"',
        "-p",
        "gpu",
        "--guard-reference=configs/base.yaml",
        "--guard-epochs",
        "90",
        "--guard-seconds-per-epoch=620.5",
        "--guard-restart",
        "train.sh",
        "--guard-run-name",
        "belongs-to-the-script",
    ]
    launch = split_sbatch_argv(argv)
    guard = launch.guard_options
    assert guard.waivers == (Waiver("config-diff", "no reference exists yet: first run of this model"),)
    assert guard.reference == Path("configs/base.yaml")
    assert guard.epochs == 90 and guard.seconds_per_epoch == 620.5 and guard.restart
    assert guard.run_name is None
    assert launch.sbatch_options == ("-p", "gpu")
    assert launch.script_args == ("--guard-run-name", "belongs-to-the-script")


def test_json_alias_and_double_dash() -> None:
    launch = split_sbatch_argv(["--json", "-t", "10", "--", "-weird-script-name.sh", "a"])
    assert launch.guard_options.json
    assert launch.script == Path("-weird-script-name.sh")
    assert launch.script_args == ("a",)


def test_wrap_means_no_script() -> None:
    launch = split_sbatch_argv(["--wrap", "python train.py", "-p", "cpu"])
    assert launch.script is None
    assert launch.wrap == "python train.py"
    with pytest.raises(UsageError, match="not allowed with --wrap"):
        split_sbatch_argv(["--wrap=hostname", "extra"])


def test_heterogeneous_job_separator_is_passed_through() -> None:
    launch = split_sbatch_argv(["-n1", ":", "-n2", "het.sh"])
    assert launch.sbatch_options == ("-n1", ":", "-n2")
    assert launch.script == Path("het.sh")


def test_names_with_shell_metacharacters_stay_plain_words() -> None:
    nasty = "out dir/$(rm -rf ~);x\n'\"%j.out"
    launch = split_sbatch_argv(["-o", nasty, "-J", "a b;c", "my script $(x).sh", "arg; echo hi"])
    assert launch.parsed_options[0].value == nasty
    assert launch.script == Path("my script $(x).sh")
    assert launch.script_args == ("arg; echo hi",)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "no batch script given"),
        (["-p", "gpu"], "no batch script given"),
        (["-p"], "needs a value"),
        (["--time"], "needs a value"),
        (["--frobnicate", "x.sh"], "unknown sbatch option --frobnicate"),
        (["-Z", "x.sh"], "unknown sbatch option -Z"),
        (["--mem-per", "1G", "x.sh"], "ambiguous sbatch option"),
        (["--hold=yes", "x.sh"], "takes no value"),
        (["--guard-waive", "paths", "x.sh"], "needs a reason"),
        (["--guard-waive", "nonsense=because", "x.sh"], "unknown check"),
        (["--guard-epochs", "ten", "x.sh"], "positive int"),
        (["--guard-seconds-per-epoch=-3", "x.sh"], "positive float"),
        (["--guard-bogus", "x.sh"], "unknown option --guard-bogus"),
        (["--guard-restart=1", "x.sh"], "takes no value"),
    ],
)
def test_bad_command_lines_give_one_line_usage_errors(argv: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=message) as caught:
        split_sbatch_argv(argv)
    assert "\n" not in str(caught.value)


def test_unknown_long_option_with_attached_value_is_kept() -> None:
    launch = split_sbatch_argv(["--tres-per-task=gres/gpu:1", "x.sh"])
    assert launch.sbatch_options == ("--tres-per-task=gres/gpu:1",)


def test_info_only_needs_no_script() -> None:
    assert split_sbatch_argv(["--version"]).info_only


def test_parse_sbatch_words_stops_at_first_non_option() -> None:
    options, index = parse_sbatch_words(["--nodes=2", "-c", "8", "python", "-p"], where="train.sh line 3")
    assert [(o.name, o.value) for o in options] == [("nodes", "2"), ("cpus-per-task", "8")]
    assert index == 3
