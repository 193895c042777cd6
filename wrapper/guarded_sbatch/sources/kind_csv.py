"""Lightning's CSVLogger as a source kind: detected by `CSVLogger` in the program or `csv` among the config's
loggers; under a folder, the one `metrics.csv` written since the run started (save_dir/name/version_N/)."""

from __future__ import annotations

from pathlib import Path

from guarded_sbatch.sources.kind_launch import LaunchKind, Uses
from guarded_sbatch.sources.base import MetricSource
from guarded_sbatch.sources.kind_base import Finds, SourceKind, is_file_named

LAUNCH = LaunchKind("csv", uses=(Uses("{where} writes a Lightning CSV log", code=("CSVLogger",), config_words=("csv",)),))


def _open(path: Path) -> MetricSource:
    from guarded_sbatch.sources.csvlog import LightningCsvSource  # noqa: PLC0415  lazy (see kind_base.py)

    return LightningCsvSource(path)


KIND = SourceKind("csv", "--csv", "Lightning CSVLogger metrics.csv", 2, "csv_ok", _open, launch=LAUNCH,
                  finds=Finds("Lightning CSV", file=is_file_named("metrics.csv")),
                  in_run_folders=True)  # save_dir/name/version_N/ under the run's output folder, beside its events
