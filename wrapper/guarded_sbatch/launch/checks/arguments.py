"""Check: the launcher line passes every option the program requires — so a job does not queue for hours and then
die at once on `train.py: error: the following arguments are required: --config`.

Learnt from the program itself, read and never run (no user code on the login node): its `add_argument(...,
required=True)` calls (argparse), in the program file. A parser's subcommands (`add_parser`) are left out (a
required option of a subcommand not chosen is not required), as is a program that hands `parse_args` its own list.
An option counts as given by its exact spelling, `--opt=value`, a short option's glued value (`-cFILE`) or an
unambiguous abbreviation (argparse accepts `--conf`). Words only a shell can expand (`"$@"`, `$(...)`) may carry
it: then the finding is a warning, never a block."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from guarded_sbatch.launch.checks.program_source import parsed
from guarded_sbatch.launch.context import PreflightContext
from guarded_sbatch.launch.results import CLI_WORDS, CheckName, CheckResult, CheckStatus, render_fix

NAME = CheckName.ARGUMENTS.value


@dataclass(frozen=True)
class Required:
    options: tuple[str, ...]  # its spellings: ("-c", "--config")
    line: int  # where the program declares it

    @property
    def name(self) -> str:
        return max(self.options, key=len)


def required_options(program: Path) -> tuple[list[Required], list[str]] | None:
    """The options the program's argparse parser requires, and every long option it declares (an abbreviation
    must name one only); None when the program cannot be read or parsed."""
    tree = parsed(program)
    if tree is None:
        return None
    subparsers = _assigned_from(tree, "add_parser")
    if _parses_own_list(tree):
        return [], []
    found: list[Required] = []
    declared: list[str] = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"):
            continue
        if isinstance(node.func.value, ast.Name) and node.func.value.id in subparsers:
            continue
        options = tuple(a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
                        and a.value.startswith("-"))
        declared += [option for option in options if option.startswith("--")]
        required = next((k.value for k in node.keywords if k.arg == "required"), None)
        if options and isinstance(required, ast.Constant) and required.value is True:
            found.append(Required(options, node.lineno))
    return found, declared


def _assigned_from(tree: ast.AST, method: str) -> set[str]:
    """Names assigned the result of a `.method(...)` call (`train = sub.add_parser("train")`)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Attribute) and node.value.func.attr == method):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return names


def _parses_own_list(tree: ast.AST) -> bool:
    """Every `parse_args(...)` / `parse_known_args(...)` call is handed a list: the command line is not what it reads."""
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
             and node.func.attr in ("parse_args", "parse_known_args")]
    return bool(calls) and all(
        (call.args and not (isinstance(call.args[0], ast.Constant) and call.args[0].value is None))
        or any(k.arg == "args" for k in call.keywords) for call in calls)


def _given(option: str, words: list[str], long_options: list[str]) -> bool:
    for word in words:
        spelled = word.partition("=")[0]
        if spelled == option:
            return True
        if option.startswith("--"):
            if len(spelled) > 2 and spelled.startswith("--") and option.startswith(spelled) and \
                    [o for o in long_options if o.startswith(spelled)] == [option]:
                return True  # argparse's abbreviation, when it names one option only
        elif len(option) == 2 and word.startswith(option) and not word.startswith("--"):
            return True  # `-cFILE`
    return False


def check_arguments(context: PreflightContext) -> CheckResult:
    launcher = context.launcher
    program = context.program_path()
    if launcher is not None and launcher.is_module:  # `python -m pkg.train`: the project's own module, if it is one
        module = context.workdir / (launcher.program.replace(".", "/") + ".py")
        program = module if module.is_file() else None
    if launcher is None or program is None:
        return CheckResult(NAME, CheckStatus.PASSED, "no python program on a launcher line: no arguments to check")
    read = required_options(program)
    required, long_options = read if read is not None else ([], [])
    if not required:
        return CheckResult(NAME, CheckStatus.PASSED,
                           f"{program.name} requires no option (no argparse `required=True` found)")
    words = [word.text for word in launcher.program_args]
    missing = [r for r in required if not any(_given(o, words, long_options) for o in r.options)]
    where = f"launcher line {launcher.line_number}"
    if not missing:
        names = ", ".join(r.name for r in required)
        return CheckResult(NAME, CheckStatus.PASSED, f"{where} passes every option {program.name} requires ({names})")
    names = ", ".join(r.name for r in missing)
    evidence = tuple(f"{program.name} line {r.line}: {' / '.join(r.options)} is required=True" for r in missing)
    evidence += (f"{where}: {launcher.text.strip()}",)
    if launcher.unresolved_args:
        shown = ", ".join(launcher.unresolved_args)
        return CheckResult(NAME, CheckStatus.WARNED,
                           f"{program.name} requires {names}, not on {where} unless {shown} (expanded only by a "
                           "shell) carries it", evidence)
    fix = "add it to the line, or {waive}"
    return CheckResult(NAME, CheckStatus.FAILED,
                       f"{program.name} requires {names}, which {where} does not give; the job would die at once on "
                       f"`error: the following arguments are required: {names}`; {render_fix(fix, NAME, CLI_WORDS)}",
                       evidence, details={"missing": [r.name for r in missing]}, fix=fix)
