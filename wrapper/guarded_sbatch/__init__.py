"""guarded-sbatch: a pre-flight for sbatch and a sidecar that watches the run.

The public Python API (everything else is internal and may move):

- `GuardedExecutor` — submitit's executor with the launch pre-flight and a sidecar per job.
- `read_metrics(kind, path)` — every metric point a run's files hold now (`kind`: "tensorboard", "wandb",
  "textlog", "mlflow", "csv", ...; `SOURCE_KINDS` lists them); `open_source(kind, path)` gives the reader
  itself, whose `read_new()` returns only the points written since its last call; `read_history(kind, path)`
  gives them as a `MetricHistory` with the crashes the job printed (a text log's traceback) beside them.
- `judge(points)` — the sidecar's decision on a history as it stands: a `Verdict` (`decision` CONTINUE /
  WAIT / STOP, `reason`, `message`, `anomalies`, `last_step`); `decide(history, policy, context)` is the
  same on a `MetricHistory`, with a `JudgePolicy` (metric keys, baseline, target) and a `RunContext`.
- `MetricPoint(step, wall_time, key, value)` — one logged value.

```python
from guarded_sbatch import judge, read_metrics
verdict = judge(read_metrics("tensorboard", "runs/my-run"))
print(verdict.decision.value, verdict.message)
```

Names are imported when first used, so `import guarded_sbatch` stays as light as the command line needs
(no submitit, numpy or tensorboard until asked for).
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:  # for type checkers only; at run time __getattr__ imports on first use
    from guarded_sbatch.sidecar.api import SOURCE_KINDS, judge, open_source, read_history, read_metrics
    from guarded_sbatch.sources.points import MetricPoint
    from guarded_sbatch.judge.ordered_checks import decide
    from guarded_sbatch.judge.history import MetricHistory
    from guarded_sbatch.judge.policy import JudgePolicy, RunContext
    from guarded_sbatch.judge.verdict import Decision, Reason, Verdict
    from guarded_sbatch.launch.executor import GuardedExecutor

# public name -> the module that defines it
_LAZY = {
    "GuardedExecutor": "guarded_sbatch.launch.executor",
    "read_metrics": "guarded_sbatch.sidecar.api",
    "read_history": "guarded_sbatch.sidecar.api",
    "open_source": "guarded_sbatch.sidecar.api",
    "judge": "guarded_sbatch.sidecar.api",
    "SOURCE_KINDS": "guarded_sbatch.sidecar.api",
    "decide": "guarded_sbatch.judge.ordered_checks",
    "MetricHistory": "guarded_sbatch.judge.history",
    "JudgePolicy": "guarded_sbatch.judge.policy",
    "RunContext": "guarded_sbatch.judge.policy",
    "Verdict": "guarded_sbatch.judge.verdict",
    "Decision": "guarded_sbatch.judge.verdict",
    "Reason": "guarded_sbatch.judge.verdict",
    "MetricPoint": "guarded_sbatch.sources.points",
}

__all__ = [
    "__version__", "GuardedExecutor", "read_metrics", "read_history", "open_source", "judge", "SOURCE_KINDS", "decide",
    "MetricHistory", "JudgePolicy", "RunContext", "Verdict", "Decision", "Reason", "MetricPoint",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'guarded_sbatch' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next access is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


class _Package(types.ModuleType):
    """The package's module type: the public name `judge` is the function, in any import order.

    Importing the subpackage `guarded_sbatch.judge` (the launch and the executor do) binds it as this package's
    attribute `judge`, which would hide the function from `from guarded_sbatch import judge`. That one binding is
    dropped: the subpackage stays in sys.modules, reached as `from guarded_sbatch.judge[.module] import name` (the
    form every caller uses; `import guarded_sbatch.judge.x as y` reads the attribute and gets the function).
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "judge" and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
