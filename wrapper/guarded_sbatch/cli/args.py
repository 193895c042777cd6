"""argparse that raises UsageError (one line, our exit code) instead of printing and exiting."""

from __future__ import annotations

import argparse
from typing import NoReturn

from guarded_sbatch.core.errors import UsageError


class ArgumentParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}; see `{self.prog} --help`")


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be greater than 0")
    return value
