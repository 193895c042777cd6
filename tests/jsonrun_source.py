"""A tracker known by a run id the launch gives the job, added the documented way: this one module, copied into the
package as `sources/kind_jsonrun.py`, plus one line in the registry, `"guarded_sbatch.sources.kind_jsonrun",` in
`sources/kinds.py` KIND_MODULES (tests/test_run_id_kind.py does exactly that on a copy of the package).

The tracker keeps each run in `<job folder>/jsonruns/<run id>.jsonl` (one JSON object per line), the id taken from
the job's JSONRUN_ID, as W&B takes WANDB_RUN_ID: several jobs' runs lie side by side in one folder, so only the id
tells the run's own. The declaration's `LaunchKind.pin` gives it: the launch exports a new id (or keeps the user's),
records it as the kind's spec, and the sidecar, `show` and `kill` open that spec by its id. Nothing else of
guarded-sbatch changes for it (the launch, the record and the sidecar handle every pinned kind alike)."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

from guarded_sbatch.sources.base import MetricSource, SourceBase
from guarded_sbatch.sources.files import guarded_reader, read_range
from guarded_sbatch.sources.kind_base import JobWriter, SourceKind
from guarded_sbatch.sources.kind_launch import LaunchKind, PinContext, PinnedRun, Uses
from guarded_sbatch.sources.points import MetricPoint
from guarded_sbatch.sources.run_sources import SourceSpec


@guarded_reader
class JsonRunSource(SourceBase):
    """One run's JSON lines, e.g. {"step": 10, "loss": 2.3}; a half-written last line waits for the next read."""

    kind = "jsonrun"

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.offset = 0

    def read_new(self) -> list[MetricPoint]:
        data, _ = read_range(self.path, self.offset)  # bounded, regular files of the job's user only
        complete = data[: data.rfind(b"\n") + 1]
        self.offset += len(complete)
        points = []
        for line in complete.decode().splitlines():
            record = json.loads(line)
            step = int(record.pop("step"))
            points += [MetricPoint(step, 0.0, key, float(value)) for key, value in record.items()]
        return points

    def files_inspected(self) -> list[str]:
        return [str(self.path)]

    def describe(self) -> str:
        return str(self.path)


def _pin(job: PinContext) -> PinnedRun:
    """The job's run: the JSONRUN_ID it already has, else a new one exported; looked for under the job's folder."""
    given = job.env.get("JSONRUN_ID", "")
    run_id = given or f"jr{secrets.token_hex(4)}"
    how = "JSONRUN_ID set by the user" if given else "exported as JSONRUN_ID"
    return PinnedRun(run_id=run_id, locator=run_id, origin="the user" if given else "guarded-sbatch",
                     export={} if given else {"JSONRUN_ID": run_id}, search=job.folders[:1],
                     note=f"jsonrun run {run_id} ({how})")


def _own_log(spec: SourceSpec) -> Path | None:
    """The run's own log: the file named by the id the job was given, under the folders it is looked for in."""
    if not spec.writer.run_id:
        return None
    return next((log for folder in spec.search if (log := Path(folder) / "jsonruns" / f"{spec.writer.run_id}.jsonl")
                 .is_file()), None)


def _open_spec(spec: SourceSpec, job: JobWriter) -> list[MetricSource]:
    log = _own_log(spec)
    return [JsonRunSource(log)] if log is not None else []


def _run_files(spec: SourceSpec) -> list[str]:
    log = _own_log(spec)
    return [str(log)] if log is not None else []


LAUNCH = LaunchKind("jsonrun", uses=(Uses("{where} logs to jsonrun", code=("JSONRUN_ID",)),), pin=_pin)

KIND = SourceKind("jsonrun", "--jsonrun", "a jsonrun run log (jsonruns/<id>.jsonl)", 1, "jsonrun_ok", JsonRunSource,
                  open_spec=_open_spec, run_files=_run_files, launch=LAUNCH)
