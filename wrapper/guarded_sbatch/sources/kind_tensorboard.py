"""TensorBoard as a source kind: detected by its writers in the program (SummaryWriter, TensorBoardLogger...) or
`runs/`, `lightning_logs/` in the job's folder; at launch its folder is named by a logdir-like key or
$TENSORBOARD_LOGGING_DIR (the run's own folder, kept apart in the record: `tb_paths`); under a folder, the folders
holding event files, grouped into runs (train/ and validation/ are one), of which the one written since the run
started is the run's. Event files name their writer (host, pid): a spec is read through a `WriterFilter`."""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path

from guarded_sbatch.sources.run_sources import SourceSpec, WriterIdentity
from guarded_sbatch.sources.kind_launch import LaunchKind, Uses
from guarded_sbatch.sources.base import MetricSource
from guarded_sbatch.sources.kind_base import Finds, JobWriter, Picking, SourceKind, claimed, modified_at

TENSORBOARD_KEYS = ("logdir", "log_dir", "logging_dir", "tensorboard_dir", "tensorboard_log_dir", "tb_dir", "tb_logdir",
                    "tb_log_dir", "summary_dir")

LAUNCH = LaunchKind("tensorboard", default_folders=("runs", "lightning_logs"), uses=(
    Uses("{where} writes TensorBoard events", imports=("tensorboard", "tensorboardX", "torch.utils.tensorboard"),
         code=("SummaryWriter", "TensorBoardLogger", "EventFileWriter"), config_words=("tensorboard",),
         arg_words=("tensorboard",)),
), path_keys=TENSORBOARD_KEYS,
   path_env=("TENSORBOARD_LOGGING_DIR",))  # $TENSORBOARD_LOGGING_DIR: transformers >= 5, the HF Trainer's folder


def created_at(path: Path) -> float:
    """When a metrics file was started: TensorBoard puts it in the name (events.out.tfevents.<time>.<host>),
    else the last write (a file last written before a job started cannot be that job's)."""
    parts = path.name.split(".")
    if "tfevents" in parts:
        index = parts.index("tfevents") + 1
        if index < len(parts) and parts[index].isdigit():
            return float(parts[index])
    return modified_at(path)


def fresh_files(since: float | None) -> Callable[[Path], bool] | None:
    """The event-file filter of a run that started at `since` (None: every file)."""
    if since is None:
        return None
    whole_second = math.floor(since)  # TensorBoard's file names hold whole seconds
    return lambda path: created_at(path) >= whole_second


def run_roots(event_folders: list[Path], base: Path) -> dict[Path, list[Path]]:
    """Event folders grouped by the run they belong to (tensorboard.run_folder): train/ and validation/ are one
    run (their parent), a writer's add_scalars subfolders belong to its folder; sibling runs (runs/a, runs/b)
    stay apart, never merged."""
    from guarded_sbatch.sources.tensorboard import run_folder  # noqa: PLC0415  lazy (see kind_base.py)

    roots: dict[Path, list[Path]] = {}
    for folder in event_folders:
        roots.setdefault(run_folder(folder, event_folders, base), []).append(folder)
    return roots


def _event_files(folder: Path) -> list[Path]:
    try:
        return [Path(entry.path) for entry in os.scandir(folder) if "tfevents" in entry.name]
    except OSError:
        return []


def _pick(event_folders: list[Path], picking: Picking) -> list[Path]:
    """The TensorBoard runs no other run claims with an event file written since the job started: those holding a
    file of the job's own processes (the pid in its name), every one of them; else, of those not written by
    another job's processes alone, the one."""
    accept = fresh_files(picking.since)
    roots: dict[Path, list[Path]] = {}
    for run_root, folders in run_roots(event_folders, picking.root).items():
        if claimed(run_root, picking.taken):
            continue
        files = [f for folder in folders for f in _event_files(folder) if accept is None or accept(f)]
        if accept is not None and not files:
            continue  # nothing in it was written since the job started: an older run's
        roots[run_root] = files
    if picking.job is None:
        return picking.one(list(roots))
    own, open_ = _by_writer(roots, picking.job)
    return sorted(own) if own else picking.one(open_)


def _by_writer(roots: dict[Path, list[Path]], job: WriterIdentity) -> tuple[list[Path], list[Path]]:
    """(the run folders holding a file of the job's processes, those holding a file nobody is known to write)."""
    from guarded_sbatch.sources.run_sources import Attribution, attribute  # noqa: PLC0415
    from guarded_sbatch.sources.writers import event_file_writer, owner_of, running_here  # noqa: PLC0415  lazy (see kind_base.py)

    def verdict(path: Path) -> Attribution:
        found = event_file_writer(path, owner_of(path))
        said = attribute(job, found)[0]
        # a process running now in the table where the job's own were seen, and not one of them, is someone else
        if said is Attribution.UNKNOWN and job.pids and running_here(found, job.pid_hosts):
            return Attribution.FOREIGN
        return said

    own, open_ = [], []
    for root, files in roots.items():
        seen = {verdict(f) for f in files}
        if Attribution.OWN in seen:
            own.append(root)
        elif Attribution.UNKNOWN in seen or not files:
            open_.append(root)
    return own, open_


def _open(path: Path) -> MetricSource:
    from guarded_sbatch.sources.tensorboard import TensorBoardSource  # noqa: PLC0415  lazy (see kind_base.py)

    return TensorBoardSource(path)


def _open_found(path: Path, since: float | None) -> MetricSource:
    from guarded_sbatch.sources.tensorboard import TensorBoardSource  # noqa: PLC0415  lazy (see kind_base.py)

    return TensorBoardSource(path, accept=fresh_files(since))


def _open_spec(spec: SourceSpec, job: JobWriter) -> list[MetricSource]:
    from guarded_sbatch.sources.tensorboard import TensorBoardSource  # noqa: PLC0415  lazy (see kind_base.py)
    from guarded_sbatch.sources.writers import WriterFilter  # noqa: PLC0415  lazy (see kind_base.py)

    source = TensorBoardSource(Path(spec.locator))
    source.accept = WriterFilter(job, source.candidates)  # the folder as the reader last walked it, never listed again
    return [source]


KIND = SourceKind("tensorboard", "--tb", "TensorBoard event folder or file", 1, "tensorboard_ok", _open,
                  open_spec=_open_spec, names_run_folder=True, launch=LAUNCH,
                  finds=Finds("TensorBoard", file=lambda name: "tfevents" in name, holder=True, pick=_pick,
                              open_found=_open_found))
