"""The argv of every Python child process guarded-sbatch starts.

`python -m X` and `python -c ...` put the current folder first on sys.path: a `guarded_sbatch/`, `json.py` or
`socket.py` that a co-worker plants in a shared project folder would run as whoever starts the child there. `-P`
(CPython 3.11+, also PYTHONSAFEPATH) leaves that folder out and, unlike `-I`, keeps PYTHONPATH and the user's
environment. PYTHONSAFEPATH is never exported: it would change how the user's own `python train.py` finds its
sibling modules. Children that read configuration from their current folder (matplotlib's `matplotlibrc`,
W&B's `wandb/settings`) also run in a folder nobody else can write (CHILD_CWD).
"""

from __future__ import annotations

import sys

SAFE_PATH_FLAG = "-P"
CHILD_CWD = "/"


def python_argv(*args: str, python: str | None = None) -> list[str]:
    """`python -P ARGS...` with this interpreter (or `python`)."""
    return [python or sys.executable, SAFE_PATH_FLAG, *args]
