"""Where the program seeds its random generators itself: a call to a function named for it (`torch.manual_seed(0)`,
`seed_everything(cfg.seed)`, `set_seed(42)`, `np.random.seed(...)`) in the program file, read with ast and never
run. A seed set in code is a seed set: the config need not carry one."""

from __future__ import annotations

import ast
from pathlib import Path

from guarded_sbatch.launch.checks.program_source import parsed


def seed_call(program: Path) -> str | None:
    """`file line N: call(...)` of the program's first seeding call with an argument; None without one."""
    tree = parsed(program)
    if tree is None:
        return None
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not (node.args or node.keywords):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if "seed" in name.lower():
            return f"{program.name} line {node.lineno}: {ast.unparse(node)[:80]}"
    return None
