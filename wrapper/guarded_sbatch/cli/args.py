"""argparse that raises UsageError (one line, our exit code) instead of printing and exiting."""

from __future__ import annotations

import argparse
from typing import NoReturn

from guarded_sbatch.core.errors import UsageError
from guarded_sbatch.core.waiting import fit, help_width


class ArgumentParser(argparse.ArgumentParser):
    def format_help(self) -> str:
        """Every command's help fits 80 columns (or a narrower terminal): descriptions and epilogs kept raw (their
        examples line by line) are wrapped by the one rule, core/waiting.fit."""
        return fit(super().format_help(), help_width()) + "\n"

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
