"""The pre-flight fails a launch whose launcher line leaves out an option the program's argparse parser requires
(`required=True`), naming it; learnt from the program's source, never run; waivable like the other checks."""

from __future__ import annotations

from pathlib import Path

from guarded_sbatch.launch.results import CheckStatus
from preflight_tree import Tree, build_clean_tree

NEEDS_CONFIG = """\
import argparse

def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("-c", "--config", required=True)
    parser.add_argument("--steps", type=int, default=100)
    sub = parser.add_subparsers()
    export = sub.add_parser("export")
    export.add_argument("--target", required=True)
    return parser.parse_args()
"""
LINE = 'srun torchrun --nnodes "$SLURM_NNODES" --nproc_per_node 4 \\\n    train.py'


def _arguments(tree: Tree, argv: list[str] | None = None):  # type: ignore[no-untyped-def]
    report = tree.run(argv)
    return report, next(r for r in report.results if r.name == "arguments")


def _launched_with(tree: Tree, words: str) -> None:
    text = (tree.root / "train.sh").read_text()
    tree.write("train.sh", text.replace(f'{LINE} --config "$CONFIG"', f"{LINE} {words}"))


def test_a_required_option_the_line_leaves_out_blocks_the_launch_naming_it(tmp_path: Path) -> None:
    tree = build_clean_tree(tmp_path)
    tree.write("train.py", NEEDS_CONFIG)
    _launched_with(tree, "--steps 200")
    report, check = _arguments(tree)
    assert check.status is CheckStatus.FAILED and "arguments" in report.blocking_checks
    assert "--config" in check.finding and "--target" not in check.finding  # a subcommand's option is its own
    assert check.details["missing"] == ["--config"]
    assert any("line 5" in item for item in check.evidence)
    waived = tree.run(["--guard-waive", "arguments=the config comes from a wrapper", "train.sh"])
    assert "arguments" not in waived.blocking_checks


def test_every_spelling_argparse_accepts_counts_as_given(tmp_path: Path) -> None:
    tree = build_clean_tree(tmp_path)
    tree.write("train.py", NEEDS_CONFIG)
    for words in ("--config a.yaml", "--config=a.yaml", "-c a.yaml", "-ca.yaml", "--conf a.yaml"):
        _launched_with(tree, words)
        assert _arguments(tree)[1].status is CheckStatus.PASSED, words
        tree.write("train.sh", (tree.root / "train.sh").read_text().replace(f"{LINE} {words}", f'{LINE} --config "$CONFIG"'))


def test_a_word_only_a_shell_expands_may_carry_it_so_it_warns(tmp_path: Path) -> None:
    tree = build_clean_tree(tmp_path)
    tree.write("train.py", NEEDS_CONFIG)
    _launched_with(tree, "$(cat args.txt)")
    assert _arguments(tree)[1].status is CheckStatus.WARNED


def test_a_program_without_required_options_or_reading_its_own_list_passes(tmp_path: Path) -> None:
    tree = build_clean_tree(tmp_path)  # its train.py has no parser
    assert _arguments(tree)[1].status is CheckStatus.PASSED
    tree.write("train.py", NEEDS_CONFIG.replace("parser.parse_args()", 'parser.parse_args(["--config", "a.yaml"])'))
    _launched_with(tree, "--steps 200")
    assert _arguments(tree)[1].status is CheckStatus.PASSED


def test_an_abbreviation_of_two_options_names_neither(tmp_path: Path) -> None:
    tree = build_clean_tree(tmp_path)
    tree.write("train.py", NEEDS_CONFIG.replace('parser.add_argument("--steps"', 'parser.add_argument("--config-dir"'))
    _launched_with(tree, "--conf a.yaml")
    assert _arguments(tree)[1].status is CheckStatus.FAILED


def test_a_module_of_the_project_is_read_too(tmp_path: Path) -> None:
    tree = build_clean_tree(tmp_path)
    tree.write("trainer/main.py", NEEDS_CONFIG)
    text = (tree.root / "train.sh").read_text()
    tree.write("train.sh", text.replace(f'{LINE} --config "$CONFIG"', 'srun python -m trainer.main --steps 5'))
    check = _arguments(tree)[1]
    assert check.status is CheckStatus.FAILED and "main.py requires --config" in check.finding, check.finding
