"""The public API at the package top, used as a user's script uses it: a real trainer's TensorBoard files read
and judged, a real text log, submitit's executor importable from the top; lazy, documented, in __all__."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "tiny_mlp"


def _train(folder: Path, *args: str) -> None:
    subprocess.run([sys.executable, str(EXAMPLE / "train.py"), "--config", str(EXAMPLE / "configs" / "synthetic-tanh-mlp.yaml"),
                    "--logdir", str(folder / "runs" / "a"), "--step-seconds", "0", "--flush-secs", "0.1", *args],
                   check=True, timeout=120, capture_output=True, cwd=folder)


SCRIPT = """
import json, sys
import guarded_sbatch
heavy = sorted(m for m in sys.modules if m.split('.')[0] in {'submitit', 'numpy', 'tensorboard', 'wandb'})
from guarded_sbatch import judge, read_metrics, open_source, SOURCE_KINDS, JudgePolicy
points = read_metrics("tensorboard", sys.argv[1])
verdict = judge(points)
healthy = judge(p for p in points if p.step < 100)
named = judge(points, JudgePolicy(train_loss_key="train/loss"))
source = open_source("tensorboard", sys.argv[1])
first, again = source.read_new(), source.read_new()
from guarded_sbatch import GuardedExecutor
import submitit
print(json.dumps({"heavy_at_import": heavy, "n": len(points), "decision": verdict.decision.value,
                  "reason": verdict.reason.value, "healthy": healthy.decision.value, "named": named.decision.value,
                  "incremental": [len(first), len(again)], "kinds": list(SOURCE_KINDS),
                  "executor": issubclass(GuardedExecutor, submitit.AutoExecutor)}))
"""


def test_read_and_judge_a_real_run_from_python(tmp_path: Path) -> None:
    _train(tmp_path, "--steps", "300", "--diverge-at", "120")
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "runs" / "a")], capture_output=True,
                         text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["heavy_at_import"] == []  # `import guarded_sbatch` pulls in nothing heavy
    assert got["n"] > 300 and got["decision"] == "STOP" and got["named"] == "STOP"
    assert got["reason"] in {"non_finite_loss", "divergence", "hidden_nan"}
    assert got["healthy"] == "CONTINUE"  # the same run judged before it diverged
    assert got["incremental"][0] == got["n"] and got["incremental"][1] == 0
    assert {"tensorboard", "wandb", "textlog"} <= set(got["kinds"]) and got["executor"]


def test_the_api_is_documented_and_listed() -> None:
    import guarded_sbatch

    for name in guarded_sbatch.__all__:
        value = getattr(guarded_sbatch, name)
        if callable(value):
            assert (value.__doc__ or "").strip(), f"{name} has no docstring"
    assert "from guarded_sbatch import judge, read_metrics" in (guarded_sbatch.__doc__ or "")
    try:
        guarded_sbatch.no_such_name
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:
        raise AssertionError("an unknown name must raise AttributeError")


def test_all_lists_exactly_the_lazy_names() -> None:
    import guarded_sbatch

    assert set(guarded_sbatch.__all__) == {"__version__", *guarded_sbatch._LAZY}


def _doc_example() -> str:
    """The first Python block of docs/python-api.md, as a user copies it."""
    text = (EXAMPLE.parents[1] / "docs" / "python-api.md").read_text()
    block = text.split("```python\n", 1)[1].split("```", 1)[0]
    assert "from guarded_sbatch import GuardedExecutor, judge" in block  # the order that hid the function
    return block


def test_the_python_api_page_example_runs_as_written(tmp_path: Path) -> None:
    _train(tmp_path, "--steps", "60")
    run = tmp_path / "runs" / "coco-resnet50-bs256-lr3e-4"  # the run folder the example reads
    (tmp_path / "runs" / "a").rename(run)
    out = subprocess.run([sys.executable, "-c", _doc_example()], capture_output=True, text=True, timeout=120,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[:2] == ["CONTINUE", "healthy"]


ORDERS = """
import sys, types
if sys.argv[1] == "executor-first":
    from guarded_sbatch import GuardedExecutor, judge
else:
    from guarded_sbatch import judge
    from guarded_sbatch import GuardedExecutor
import guarded_sbatch
import guarded_sbatch.judge.ordered_checks  # the subpackage imported outright, after and beside the function
from guarded_sbatch.judge import decide, verdict
assert callable(judge) and not isinstance(judge, types.ModuleType), judge
assert guarded_sbatch.judge is judge and judge.__module__ == "guarded_sbatch.sidecar.api"
assert sys.modules["guarded_sbatch.judge"].decide is decide and verdict.Verdict is guarded_sbatch.Verdict
print(judge([]).decision.value)
"""


def test_judge_is_the_function_in_any_import_order() -> None:
    for order in ("executor-first", "judge-first"):
        out = subprocess.run([sys.executable, "-c", ORDERS, order], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, f"{order}: {out.stderr}"
        assert out.stdout.strip() == "WAIT", order


def _reaches_the_subpackage_by_attribute(node: ast.AST) -> bool:
    if isinstance(node, ast.Import):  # `import guarded_sbatch.judge.x as y` reads the attribute `judge`
        return any(a.asname and a.name.startswith("guarded_sbatch.judge.") for a in node.names)
    return (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and node.value.attr == "judge"
            and isinstance(node.value.value, ast.Name) and node.value.value.id == "guarded_sbatch")


def test_no_caller_reaches_the_judge_subpackage_as_an_attribute() -> None:
    """`guarded_sbatch.judge` is the function: the subpackage is imported with `from guarded_sbatch.judge... import`."""
    root = EXAMPLE.parents[1]
    wrong = [f"{path.relative_to(root)}:{node.lineno}" for folder in ("wrapper", "tests", "bench", "examples", "scripts")
             for path in (root / folder).rglob("*.py")
             for node in ast.walk(ast.parse(path.read_text(errors="replace")))
             if _reaches_the_subpackage_by_attribute(node)]
    assert wrong == []
