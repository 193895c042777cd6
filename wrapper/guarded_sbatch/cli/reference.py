"""`guarded-sbatch reference RUN`: make a finished healthy run the reference of its config family."""

from __future__ import annotations

import sys

from guarded_sbatch.cli.args import ArgumentParser
from guarded_sbatch.core.errors import ExitCode


def run_reference(argv: list[str]) -> int:
    parser = ArgumentParser(prog="guarded-sbatch reference",
                            description="make a finished healthy run the reference of its config (the pre-flight "
                                        "diffs the next launches of that config against it)")
    parser.add_argument("run", help="the run: its id, job id or name (see `guarded-sbatch status`)")
    args = parser.parse_args(argv)
    from guarded_sbatch.launch.run_reference import make_reference  # after --help: the pre-flight's checks load
    from guarded_sbatch.records.registry import find_run

    record = find_run(args.run)
    make_reference(record)
    print(f"guarded-sbatch: run {record.run_id} is now the reference of {record.config_path}", file=sys.stderr)
    return int(ExitCode.OK)
