"""A text log as a source kind: the job's stdout/stderr (recorded at launch from --output/--error, `%N` matched
once the job runs) or a log a person names with --log; never looked for under a folder."""

from __future__ import annotations

from pathlib import Path

from guarded_sbatch.sources.run_sources import SourceSpec
from guarded_sbatch.sources.base import MetricSource, SourceError
from guarded_sbatch.sources.kind_base import JobWriter, SourceKind


def _open(target: Path) -> MetricSource:
    from guarded_sbatch.sources.csvlog import LightningCsvSource, is_csv_text  # noqa: PLC0415  lazy (see kind_base.py)
    from guarded_sbatch.sources.textlog import TextLogSource, TrainerStateSource  # noqa: PLC0415  lazy (see kind_base.py)

    if target.name == "trainer_state.json":
        return TrainerStateSource(target)
    if target.suffix.lower() == ".csv" or is_csv_text(_head(target)):
        return LightningCsvSource(target)  # a CSV handed as the log: a header of names, rows of numbers
    return TextLogSource(target)


def _head(target: Path) -> bytes:
    """The first bytes of a regular file (b"" when it is not there yet or is no regular file)."""
    from guarded_sbatch.sources.files import check_regular, read_data  # noqa: PLC0415  lazy (see kind_base.py)

    try:
        check_regular(target)
        return read_data(target, 0, 4096).data
    except (OSError, SourceError):
        return b""  # the reader says what is wrong with it


def _open_spec(spec: SourceSpec, job: JobWriter) -> list[MetricSource]:
    """A job's stdout/stderr: a %N (the node, known once the job runs) matches the one such file written since."""
    from guarded_sbatch.sources.textlog import TextLogSource  # noqa: PLC0415  lazy (see kind_base.py)

    if "%N" not in spec.locator:
        path = Path(spec.locator)
        return [_open(path)] if path.is_file() else []
    pattern = Path(spec.locator)
    since = job().since
    try:
        matches = [p for p in pattern.parent.glob(pattern.name.replace("%N", "*"))
                   if p.is_file() and p.stat().st_mtime >= since]
    except OSError:
        return []
    return [TextLogSource(matches[0])] if len(matches) == 1 else []


KIND = SourceKind("textlog", "--log", "a text log of the run", 3, "log_fallback", _open, open_spec=_open_spec)
