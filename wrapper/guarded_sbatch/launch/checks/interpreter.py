"""Check: the interpreter the job will run, resolved as the job will resolve it, can import what the training
script imports at its top — so a job does not die at once on `ModuleNotFoundError: No module named 'torch'`
because the wrong environment came first on PATH (guarded-sbatch's own, say).

The job's PATH is the submitting one (sbatch exports it) changed by the script's lines before its launcher line:
`source DIR/bin/activate`, `conda activate NAME` and plain `PATH=` assignments are followed; `module load`,
`eval "$(conda shell …)"` and anything else that only a running shell knows make the answer a warning, never a
block. The imports are asked of that interpreter with `importlib.util.find_spec` (nothing is imported), under a
deadline."""

from __future__ import annotations

import ast
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guarded_sbatch.core.errors import CommandError
from guarded_sbatch.core.fsutil import read_bounded
from guarded_sbatch.core.remembered import recall, remember
from guarded_sbatch.core.runner import run_command
from guarded_sbatch.launch.checks.program_source import parsed
from guarded_sbatch.launch.context import PreflightContext
from guarded_sbatch.launch.results import CheckName, CheckResult, CheckStatus

NAME = CheckName.INTERPRETER.value
ASK_TIMEOUT_S = 15.0
ACTIVATE = re.compile(r"^\s*(?:source|\.)\s+(\S+)/bin/activate\b")
CONDA = re.compile(r"^\s*(?:conda|mamba|micromamba)\s+activate\s+(\S+)")
UNFOLLOWED = re.compile(r"^\s*(?:module\s+(?:load|add|swap)|ml\s+\w|eval\s|spack\s+load|pyenv\s|source\s+\S*conda\S*)")
# `report_to` (HF Trainer, and the tools that copy it) names integrations the trainer imports when it starts
REPORT_TO_MODULES = {"wandb": "wandb", "tensorboard": "tensorboard", "mlflow": "mlflow", "comet_ml": "comet_ml",
                     "neptune": "neptune", "clearml": "clearml", "dvclive": "dvclive", "swanlab": "swanlab"}
FIND = ("import importlib.util, json, sys\nmissing = []\nfor name in sys.argv[1:]:\n"
        "    try:\n        found = importlib.util.find_spec(name) is not None\n"
        "    except (ImportError, ValueError):\n        found = False\n"
        "    missing += [] if found else [name]\n"
        "print(json.dumps({'python': sys.executable, 'prefix': sys.prefix, 'version': sys.version.split()[0], "
        "'missing': missing, 'path': [p or '/' for p in sys.path]}))\n")
# what else decides what a Python finds: its environment (the job's is the submitting one)
IMPORT_ENV = ("PYTHONPATH", "PYTHONHOME", "PYTHONNOUSERSITE", "PYTHONUSERBASE", "PYTHONSAFEPATH", "VIRTUAL_ENV",
              "CONDA_PREFIX", "HOME")


@dataclass(frozen=True)
class JobPath:
    path: str  # the job's PATH as far as the script's lines can be followed
    changed_by: tuple[str, ...]  # "line 7: source ~/env/bin/activate"
    unfollowed: tuple[str, ...]  # "line 5: module load cuda": lines only a running shell knows the effect of


def _expand(text: str, env: dict[str, str]) -> str:
    text = os.path.expanduser(text.strip("'\""))
    return re.sub(r"\$\{?(\w+)\}?", lambda m: env.get(m.group(1), m.group(0)), text)


def job_path(context: PreflightContext) -> JobPath:
    env = dict(context.env)
    path = env.get("PATH", os.defpath)
    changed: list[str] = []
    unfollowed: list[str] = []
    last = context.launcher.line_number if context.launcher else 0
    for number, line in enumerate(context.script.text.splitlines()[: max(last - 1, 0)], start=1):
        if line.lstrip().startswith("#"):
            continue
        venv, conda = ACTIVATE.match(line), CONDA.match(line)
        if venv:
            path = f"{_expand(venv.group(1), env)}/bin:{path}"
            changed.append(f"line {number}: {line.strip()}")
        elif conda:
            prefix = _conda_prefix(_expand(conda.group(1), env), env)
            if prefix is None:
                unfollowed.append(f"line {number}: {line.strip()} (no such conda environment found)")
            else:
                path = f"{prefix}/bin:{path}"
                changed.append(f"line {number}: {line.strip()}")
        elif UNFOLLOWED.match(line):
            unfollowed.append(f"line {number}: {line.strip()}")
    return JobPath(path, tuple(changed), tuple(unfollowed))


def _conda_prefix(name: str, env: dict[str, str]) -> str | None:
    if "/" in name:
        return name if Path(name, "bin").is_dir() else None
    roots = [Path(env[v]).parents[1] for v in ("CONDA_EXE", "MAMBA_EXE") if env.get(v)]
    roots += [Path(env["CONDA_PREFIX"]).parent.parent] if "/envs/" in env.get("CONDA_PREFIX", "") else []
    roots += [Path(env["CONDA_PREFIX"])] if env.get("CONDA_PREFIX") else []
    for root in roots:
        if name == "base" and (root / "bin").is_dir():
            return str(root)
        if (root / "envs" / name / "bin").is_dir():
            return str(root / "envs" / name)
    return None


def _which(command: str, path: str) -> Path | None:
    if "/" in command:
        return Path(command) if os.access(command, os.X_OK) else None
    for folder in path.split(":"):
        candidate = Path(folder or ".") / command
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def _interpreter_of(executable: Path) -> Path:
    """torchrun, accelerate, deepspeed: the Python their `#!` line names (a console script's)."""
    try:
        first = read_bounded(executable, 512, head=True).split(b"\n")[0].decode("utf-8", "replace")
    except OSError:
        return executable
    words = first[2:].split() if first.startswith("#!") else []
    if words and Path(words[0]).name == "env" and len(words) > 1:
        return Path(words[1])
    return Path(words[0]) if words else executable


Import = tuple[str, int, str]  # (package, line, the function importing it: "" at module level or in main())


def script_imports(program: Path) -> tuple[list[Import], list[Import]]:
    """The packages the script needs: imported at module level or directly in its `main()` (outside `try` and `if`
    blocks: an optional import may well be missing); and those a helper function imports directly in its body
    (needed once that code runs, which the pre-flight cannot know)."""
    tree = parsed(program)
    if tree is None:
        return [], []
    local = {p.stem for p in program.parent.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()} \
        if program.parent.is_dir() else set()
    needed = _packages(_needed_statements(tree.body), "", local)
    helpers: list[Import] = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name != "main":
            helpers += _packages(_needed_statements(node.body, in_main=True), node.name, local)
    seen = {name for name, _, _ in needed}
    later: list[Import] = []
    for item in helpers:  # each package once, where it is first imported
        if item[0] not in seen:
            seen.add(item[0])
            later.append(item)
    return needed, later


def _packages(statements: list[ast.stmt], function: str, local: set[str]) -> list[Import]:
    names: dict[str, int] = {}
    for node in statements:
        if isinstance(node, ast.Import):
            for alias in node.names:
                names.setdefault(alias.name.split(".")[0], node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.setdefault(node.module.split(".")[0], node.lineno)
    return [(name, line, function) for name, line in names.items()
            if name not in sys.stdlib_module_names and name not in local and name != "__future__"]


def _needed_statements(body: list[ast.stmt], *, in_main: bool = False) -> list[ast.stmt]:
    out: list[ast.stmt] = []
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.append(node)
        elif isinstance(node, ast.If) and not in_main:  # `if __name__ == "__main__":` and the like
            out += _needed_statements(node.body)
        elif isinstance(node, ast.With):
            out += _needed_statements(node.body, in_main=in_main)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "main" and not in_main:
            out += _needed_statements(node.body, in_main=True)
    return out


def check_interpreter(context: PreflightContext) -> CheckResult:
    launcher = context.launcher
    if launcher is None:
        return CheckResult(NAME, CheckStatus.PASSED, "no python launcher line: no interpreter to check")
    where = job_path(context)
    command = _launcher_command(launcher.text, launcher.kind)
    executable = _which(command, where.path)
    evidence = [f"launcher line {launcher.line_number}: {command}", *where.changed_by]
    evidence += [f"not followed (only a running shell knows): {line}" for line in where.unfollowed]
    if executable is None:
        status = CheckStatus.WARNED if where.unfollowed else CheckStatus.FAILED
        return CheckResult(NAME, status, f"`{command}` is not on the job's PATH: the job would fail to start it; "
                           "activate its environment in the script or put it first on PATH before submitting",
                           tuple(evidence))
    python = executable if launcher.kind == "python" else _interpreter_of(executable)
    program = context.program_path()
    needed, in_functions = script_imports(program) if program is not None and program.is_file() else ([], [])
    imports = [(name, line) for name, line, _ in needed]
    imports += _reported_to(context, {name for name, _ in imports})
    helpers = [item for item in in_functions if item[0] not in {name for name, _ in imports}]
    try:
        # from "/": the current folder is on sys.path of `-c`, and nothing planted in the project may run as you
        asked = [*(n for n, _ in imports), *(n for n, _, _ in helpers)]
        answer = _ask(python, asked)
    except (CommandError, OSError, ValueError, IndexError) as exc:
        return CheckResult(NAME, CheckStatus.WARNED, f"could not ask the job's interpreter {python} what it can "
                           f"import ({str(exc)[:120]})", tuple(evidence))
    evidence.insert(1, f"the job runs {answer['python']} (Python {answer['version']})")
    unavailable = set(answer["missing"])
    missing = [(n, line) for n, line in imports if n in unavailable]
    own = _is_own(str(answer.get("prefix", "")))
    if not missing:
        found = ", ".join(n for n, _ in imports) or "no third-party package"
        program_name = program.name if program else "the program"
        later = [item for item in helpers if item[0] in unavailable]
        if later:
            where_later = ", ".join(f"{n} in {function}() (line {line})" for n, line, function in later)
            return CheckResult(NAME, CheckStatus.WARNED, f"{answer['python']} imports what {program_name} imports at "
                               f"its top ({found}), but not what it imports inside a function: {where_later}; the "
                               "run fails once that code runs: install it in the job's environment",
                               tuple(evidence), {"python": answer["python"], "missing": [n for n, _, _ in later]})
        return CheckResult(NAME, CheckStatus.PASSED, f"{answer['python']} imports what {program_name} imports: "
                           f"{found}", tuple(evidence))
    names = _where_needed(missing, program.name if program else "the program")
    fix = ("that is guarded-sbatch's own environment, first on PATH: put only `guarded-sbatch` on PATH (README), "
           "or activate your environment in the script" if own else
           "activate the environment that has them in the script (`source ENV/bin/activate` before the launcher "
           "line) or submit from a shell where it is active")
    status = CheckStatus.WARNED if where.unfollowed else CheckStatus.FAILED
    return CheckResult(NAME, status, f"the job's {answer['python']} cannot import {names}: the job would die at "
                       f"once; {fix}", tuple(evidence), {"python": answer["python"], "missing": [n for n, _ in missing]})


def _ask(python: Path, asked: list[str]) -> dict[str, Any]:
    """What `python` finds of `asked`. An answer that finds everything is remembered while the interpreter and every
    folder on its sys.path are unchanged (a package removed changes its folder), so a loop of launches asks once; a
    package missing is asked again each time (installing it may add a folder to sys.path)."""
    question = [os.path.realpath(python), str(python), asked, {name: os.environ.get(name) for name in IMPORT_ENV}]
    known = recall("interpreter-imports", question)
    if isinstance(known, dict):
        return known
    answer = json.loads(run_command([str(python), "-c", FIND, *asked],
                                    timeout=ASK_TIMEOUT_S, cwd="/").stdout.strip().splitlines()[-1])
    if not isinstance(answer, dict) or not isinstance(answer.get("missing"), list):
        raise ValueError(f"not an answer: {str(answer)[:80]}")
    folders = [str(p) for p in answer.get("path") or [] if isinstance(p, str)]
    if not answer["missing"]:
        remember("interpreter-imports", question, answer, [os.path.realpath(python), *folders])
    return answer


def _where_needed(missing: list[tuple[str, int]], program: str) -> str:
    """`torch, transformers (train.py lines 1, 2), wandb (the config's report_to)`."""
    in_script = [(n, line) for n, line in missing if line]
    parts = [", ".join(n for n, _ in in_script) + f" ({program} line" + ("s " if len(in_script) > 1 else " ") +
             ", ".join(str(line) for _, line in in_script) + ")"] if in_script else []
    reported = [n for n, line in missing if not line]
    parts += [", ".join(reported) + " (the config's report_to)"] if reported else []
    return ", ".join(parts)


def _reported_to(context: PreflightContext, known: set[str]) -> list[tuple[str, int]]:
    """The integrations the run's config asks the trainer to report to (line 0: the config, not the script)."""
    found = context.intended.find(("report_to",)) if context.intended is not None else None
    value = found[1] if found else None
    names = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    modules = (REPORT_TO_MODULES.get(str(name).lower()) for name in names)
    return [(module, 0) for module in dict.fromkeys(m for m in modules if m and m not in known)]


def _launcher_command(text: str, kind: str) -> str:
    words = text.split()
    for word in words:
        if kind == "python" and re.match(r"^(?:.*/)?python(?:3(?:\.\d+)?)?$", word):
            return word
        if kind != "python" and Path(word).name in {kind, "torchrun", "accelerate", "deepspeed"}:
            return word
    return "python"


def _is_own(prefix: str) -> bool:
    """The job's Python is guarded-sbatch's own environment (a venv's prefix, not the interpreter it links to)."""
    return bool(prefix) and os.path.realpath(prefix) == os.path.realpath(sys.prefix)
