"""The optional packages: which extra of pyproject.toml installs each, and the one line that says so when one is
missing. `pip install guarded-sbatch` (the Python API in a user's own environment) brings only the core; the tool's
own environment installs `[cli]`, which holds every extra below (scripts/lib/venv.sh)."""

from __future__ import annotations

import importlib.util
import sys

from guarded_sbatch.core.errors import UsageError

# the optional module -> the extra that installs it ([project.optional-dependencies]; tests/test_wheel.py holds the
# two to each other)
EXTRA_OF = {"wandb": "wandb", "matplotlib": "plot", "plotext": "plot", "apprise": "alerts", "rich": "terminal"}


class MissingExtraError(UsageError):
    """A feature needs an optional package that is not installed: the message names the extra to install."""


def installed(module: str) -> bool:
    """Whether `module` (one of EXTRA_OF) can be imported; finds it without importing it."""
    if module in sys.modules:  # imported already (find_spec would want its __spec__), or blocked (None)
        return sys.modules[module] is not None
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken or half-removed install counts as missing
        return False


def missing_line(module: str, what: str) -> str:
    """The one line for people: what needs `module`, and the install command that brings it."""
    install = f"pip install 'guarded-sbatch[{EXTRA_OF[module]}]'"
    return f"{what} needs {module}, which is not installed here; install it with: {install}"


def require(module: str, what: str) -> None:
    """Raise MissingExtraError (exit 2, one line) unless `module` is installed."""
    if not installed(module):
        raise MissingExtraError(missing_line(module, what))
