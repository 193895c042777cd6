"""Every exit code comes from one table (core/errors.py ExitCode): the CLI returns no bare number, and the user
guide and --help list the table as it is."""

from __future__ import annotations

import ast
import re
import io
from contextlib import redirect_stdout
from pathlib import Path

from guarded_sbatch.cli.main import main
from guarded_sbatch.core.errors import ExitCode
from package_extras import exit_codes_markdown

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "wrapper" / "guarded_sbatch"


def _bare_codes(path: Path) -> list[str]:
    """`return 3` in a CLI module, `sys.exit(3)` / `SystemExit(3)` anywhere: a number that is no ExitCode."""
    found = []
    cli = path.parent.name == "cli" or path.name == "__main__.py"
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        value = None
        if cli and isinstance(node, ast.Return):
            value = node.value
        elif isinstance(node, ast.Call) and node.args and (
                isinstance(node.func, ast.Attribute) and node.func.attr == "exit"
                or isinstance(node.func, ast.Name) and node.func.id == "SystemExit"):
            value = node.args[0]
        if isinstance(value, ast.IfExp):
            value = value.body if isinstance(value.body, ast.Constant) else value.orelse
        if isinstance(value, ast.Constant) and type(value.value) is int:
            found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {value.value}")
    return found


def test_no_exit_code_is_a_bare_number() -> None:
    bare = [line for path in sorted(PACKAGE.rglob("*.py")) for line in _bare_codes(path)]
    assert not bare, f"exit codes written as numbers (use core.errors.ExitCode): {bare}"


def test_the_user_guide_and_help_list_the_one_table() -> None:
    guide = (REPO / "docs" / "user-guide.md").read_text(encoding="utf-8")
    assert exit_codes_markdown() in guide, "docs/user-guide.md's exit codes are not ExitCode's (exit_codes_markdown())"
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["--help"]) == ExitCode.OK
    lines = out.getvalue().splitlines()
    assert max(len(line) for line in lines) <= 80  # wrapped under its column, never wider than 80
    flat = " ".join(out.getvalue().split())
    for code in ExitCode:
        assert f"{code.value} {code.meaning}" in flat, code


def test_the_codes_are_distinct_and_fit_a_shell() -> None:
    values = [code.value for code in ExitCode]
    assert len(values) == len(set(values)) == len(ExitCode.__members__) and all(0 <= v < 256 for v in values)


def test_every_commands_help_names_only_codes_of_the_table() -> None:
    from guarded_sbatch.cli.main import COMMANDS

    known = {code.value for code in ExitCode}
    for command in ["", *COMMANDS]:
        out = io.StringIO()
        with redirect_stdout(out):
            try:
                code = main([command, "--help"] if command else ["--help"])
            except SystemExit as exc:  # argparse's own --help
                code = exc.code
        assert code in (0, None), command
        for paragraph in out.getvalue().split("\n\n"):
            if "exit code" in paragraph:
                text = " ".join(paragraph[paragraph.index("exit code"):].split())
                named = {int(n) for n in re.findall(r"(?<![\w.:/@=-])(\d{1,3})(?= [A-Za-z(])", text)}
                assert named and named <= known, (command, sorted(named - known), text[:200])
