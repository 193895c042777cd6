"""Incremental reader of TensorBoard event files, decoding the few Event fields it needs by hand.

Unlike TensorBoard's own loader (files in name order, never going back) every event file under the
folder keeps its own offset, so late writes to an older file (a restarted job whose first process is
still flushing) are not lost. A metric's name is its tag as the trainer wrote it, with a namespace only where
TensorBoard itself shows one: the train/ and validation/ subfolders of one run (Keras) or a writer's own
add_scalars subfolders give `validation/epoch_loss`; the run's folder (HF's and SummaryWriter's
runs/<date>_<host>, Lightning's version_N) is no part of the name. Files accepted as one run's own (`accept`:
the sidecar's, written since the job started) are that run's whatever folders they are in (a requeued HF job
starts a new runs/<date>_<host>); without such a filter (`monitor --tb runs/`) several runs under the folder keep
their folder as a prefix, the first one seen excepted, so they are never merged.
"""

from __future__ import annotations

import gc
import os
import struct
import time
from collections import deque
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guarded_sbatch.sources.points import Axis, MetricPoint, newest_per_key_step
from guarded_sbatch.sources.base import Batch, SourceBase, SourceError
from guarded_sbatch.sources.files import LIMITS, check_regular, data_extent, guarded_reader, listing, open_regular
from guarded_sbatch.sources.tb_columns import ColumnSink
from guarded_sbatch.sources.tb_records import RecordDecoder
from guarded_sbatch.sources.tfrecord import HEADER_SIZE, find_next_header
from guarded_sbatch.sources.writers import WriterFilter, owned, owner_of, reader_uid

EVENT_FILE_MARKER = "tfevents"
DEFAULT_CHUNK_BYTES = 4 * 1024 * 1024
MAX_DEPTH = 8  # logs/<project>/<sweep>/<run>/<version>/<split>/ is common; deeper is bounded by entries
MAX_ENTRIES = 20_000
_SKIPPED_FOLDERS = {".git", "__pycache__", "node_modules", ".venv", "venv", "site-packages", "checkpoints",
                    "wandb", "media"}

# TensorBoard's own split folders of one run (Keras writes logs/train and logs/validation)
SPLIT_FOLDERS = frozenset({"train", "training", "val", "valid", "validation", "eval", "evaluation", "test"})


@dataclass
class _EventFile:
    path: Path
    key_prefix: str
    offset: int = 0
    resyncing: bool = False
    bytes_per_point: float = 0.0  # of the last chunk read: a read of n points asks for about that many bytes


def _sort_key(path: Path) -> tuple[str, int, str]:
    # events.out.tfevents.<unix time>.<host>...: order by folder, then creation time.
    parts = path.name.split(".")
    created = int(parts[3]) if len(parts) > 3 and parts[3].isdigit() else 0
    return str(path.parent), created, path.name


class FolderListings:
    """What each folder under a run's TensorBoard path held at its last listing (its subfolders and event files),
    kept while the folder is unchanged: the same inode and mtime, the mtime older than RACY_S (a name added in the
    clock tick of the listing changes no mtime). A reader polled many times a second lists a folder of 20 000 names
    once, not at every read."""

    RACY_S = 2.0

    def __init__(self) -> None:
        self._kept: dict[Path, tuple[tuple[int, int, int, int], list[str], list[str], int, bool]] = {}
        self._visited: list[Path] = []

    def start(self) -> None:
        self._visited = []

    def unchanged(self) -> bool:
        """Whether every folder of the last walk is as it was listed (a stat each, no listing)."""
        now = time.time()
        for folder in self._visited:
            kept = self._kept.get(folder)
            try:
                info = folder.stat()
            except OSError:
                return False
            if kept is None or kept[0][:3] != (info.st_dev, info.st_ino, info.st_mtime_ns) \
                    or now - info.st_mtime < self.RACY_S:
                return False
        return bool(self._visited)

    def entries(self, folder: Path, info: os.stat_result, limit: int) -> tuple[list[str], list[str], int, bool]:
        """(subfolders, event files, entries taken, more left) of folder, listed at most `limit` entries."""
        self._visited.append(folder)
        key = (info.st_dev, info.st_ino, info.st_mtime_ns, limit)
        kept = self._kept.get(folder)
        if kept is not None and kept[0] == key and time.time() - info.st_mtime >= self.RACY_S:
            return kept[1], kept[2], kept[3], kept[4]
        folders: list[str] = []
        events: list[str] = []
        entries, more = listing(folder, limit)
        for entry in entries:
            try:
                if entry.is_dir():
                    folders.append(entry.name)
                elif EVENT_FILE_MARKER in entry.name:
                    events.append(entry.name)  # whatever it is: the reader refuses (and names) a non-file
            except OSError:
                continue
        self._kept[folder] = (key, folders, events, len(entries), more)
        return folders, events, len(entries), more


def find_event_files(root: Path, max_depth: int = MAX_DEPTH, max_entries: int = MAX_ENTRIES,
                     notes: list[str] | None = None, listings: FolderListings | None = None) -> list[Path]:
    """Event files under root, breadth-first to max_depth folders deep and at most max_entries entries
    (`listings`: the folders' listings kept from the last walk, for a reader that walks again and again).

    Symlinked run folders are followed (experiment trees often link runs in from scratch space), each
    real folder once, so a link back up the tree cannot loop. Paths keep the link's name: that is
    the run name TensorBoard shows.
    """
    if root.is_file():
        return [root]
    listings = listings or FolderListings()
    listings.start()
    found: list[Path] = []
    seen: set[tuple[int, int]] = set()
    queue: deque[tuple[Path, int]] = deque([(root, 0)])
    entries_left = max_entries
    truncated = False
    while queue and entries_left > 0:
        folder, depth = queue.popleft()
        try:
            info = folder.stat()
        except OSError:
            continue
        if (info.st_dev, info.st_ino) in seen:
            continue
        seen.add((info.st_dev, info.st_ino))
        folders, events, taken, more = listings.entries(folder, info, entries_left)
        truncated = truncated or more
        if depth < max_depth:
            queue.extend((folder / name, depth + 1) for name in folders if name not in _SKIPPED_FOLDERS)
        found.extend(folder / name for name in events)
        entries_left -= taken
    if notes is not None and (truncated or (queue and entries_left <= 0)):
        notes.append(f"{root} holds more than {max_entries} entries: the search for event files stopped there "
                     "(point --tb at the run's own folder)")
    return sorted(found, key=_sort_key)


def run_folder(folder: Path, event_folders: Collection[Path], base: Path) -> Path:
    """The run an event folder belongs to: the topmost folder from `base` down to it that holds event files
    itself (a writer's add_scalars subfolders are namespaces of its run), and the parent of a split folder
    (train/, validation/) when no folder above holds any (Keras's logs/train + logs/validation)."""
    holders = set(event_folders)
    chain = [folder, *folder.parents]
    inside = chain[: chain.index(base) + 1] if base in chain else [folder]
    for candidate in reversed(inside):
        if candidate in holders:
            break
    else:
        candidate = folder
    if candidate == folder and folder != base and folder.name.lower() in SPLIT_FOLDERS:
        return folder.parent
    return candidate


@guarded_reader
class TensorBoardSource(SourceBase):
    """Scalars from every event file under a folder (or one event file), read incrementally."""

    kind = "tensorboard"
    batched = True

    def __init__(self, path: str | os.PathLike[str], *, check_crc: bool = True,
                 chunk_bytes: int = DEFAULT_CHUNK_BYTES, accept: Callable[[Path], bool] | None = None) -> None:
        self.path = Path(path)
        self.accept = accept  # which event files are one run's own (sources/writers.py); None: any of the reader's user's
        self.check_crc = check_crc
        self.chunk_bytes = chunk_bytes
        self.bad_records = 0  # crc failures and undecodable events
        self.skipped_bytes = 0  # bytes jumped over to find the next record after a corrupt length
        self._files: dict[Path, _EventFile] = {}
        self._decoder = RecordDecoder(check_crc=check_crc)
        self._foreign: dict[str, str] = {}  # path -> why it is not read (another user's)
        self._refused: set[Path] = set()  # the paths of those files
        self._listings = FolderListings()
        self._in_order: list[_EventFile] = []
        self._undecided: list[Path] = []  # the reader's user's files the run's filter has not taken (yet)
        self._only_run: Path | None = None  # the run whose folder is no part of its names (set at the first files)
        self._several_runs = False

    def describe(self) -> str:
        return str(self.path)

    def files_inspected(self) -> list[str]:
        return [str(p) for p in self._files]

    def axes(self) -> dict[str, Axis]:
        """Keras writes `epoch_loss`, `epoch_accuracy`, ... with step = epoch: those series are on epochs."""
        return {key: Axis.EPOCH for key in self._decoder.last_step if key.rsplit("/", 1)[-1].startswith("epoch_")}

    def _refresh_files(self) -> list[_EventFile]:
        if (self._files or self._undecided) and self.path.is_dir() and self._listings.unchanged():
            if self._undecided:  # the run's filter may take them now (a writer learned): they alone are asked again
                self._take(self._undecided)
            return self._in_order
        notes: list[str] = []
        found = find_event_files(self.path, notes=notes, listings=self._listings)
        if notes and not found and not self._files:
            raise SourceError(f"no event file found: {notes[0]}")
        self._take([path for path in found if path not in self._files and path not in self._refused
                    and self._owned(path)])
        return self._in_order

    def candidates(self) -> list[Path]:
        """The reader's user's event files of the last walk: those read and those the run's filter left."""
        return [*self._files, *self._undecided]

    def _take(self, candidates: list[Path]) -> None:
        self._undecided = candidates  # weighed by the filter beside the files already read
        new = [path for path in candidates if self.accept is None or self.accept(path)]
        self._undecided = [path for path in candidates if path not in new]
        if new and not self.path.is_dir():
            self._files[self.path] = _EventFile(self.path, "")
        elif new:
            folders = {f.path.parent for f in self._files.values()} | {path.parent for path in new}
            runs = {path: run_folder(path.parent, folders, self.path) for path in new}
            if self._only_run is None and not self._several_runs:
                if len(set(runs.values())) == 1:
                    self._only_run = next(iter(runs.values()))
                else:
                    self._several_runs = True
            for path, run in runs.items():
                self._files[path] = _EventFile(path, self._key_prefix(path.parent, run))
        if new:
            self._in_order = sorted(self._files.values(), key=lambda f: _sort_key(f.path))

    def _key_prefix(self, folder: Path, run: Path) -> str:
        """The run's folder when it is not the only run here, then the namespace within the run."""
        own = self.accept is not None or run in (self._only_run, self.path)
        parts = [] if own else [run.relative_to(self.path).as_posix()]
        if folder != run:
            parts.append(folder.relative_to(run).as_posix())
        return "".join(part + "/" for part in parts)

    def read_new(self, max_points: int | None = None) -> list[MetricPoint]:
        """New points from all files; with max_points, stop after about that many (call again for more)."""
        sink = ColumnSink()
        repeated = self._read_into(sink, max_points)
        points = sink.points()
        return newest_per_key_step(points) if repeated else points

    def read_batch(self, max_points: int) -> Batch:
        return self.read_columns(max_points=max_points)

    def _owned(self, path: Path) -> bool:
        """A file another user owns is never read, with or without a run's filter (the note says so)."""
        if owned(path):
            return True
        self._refused.add(path)  # looked at once: a folder of his 20 000 files is not weighed again at every read
        if len(self._foreign) < 64:
            self._foreign[str(path)] = f"owned by uid {owner_of(path)}, not the reader's user (uid {reader_uid()})"
        return False

    def ownership_note(self) -> str:
        foreign = "; ".join(f"{Path(p).name}: {why}" for p, why in sorted(self._foreign.items())[:4])
        notes = [self.accept.note() if isinstance(self.accept, WriterFilter) else "",
                 f"not read: {foreign}" if foreign else ""]
        return "; ".join(note for note in notes if note)

    def read_columns(self, max_points: int | None = None) -> dict[str, tuple[Any, Any, Any]]:
        """read_new's points as {key: (steps, wall_times, values)} numpy columns, in arrival order per
        key (runs of plain scalar events are decoded in bulk: no object per point)."""
        sink = ColumnSink()
        repeated = self._read_into(sink, max_points)
        return sink.columns(newest_by_wall_time=repeated)

    def _read_into(self, points: ColumnSink, max_points: int | None) -> bool:
        repeated = False
        for event_file in self._refresh_files():
            try:
                size = check_regular(event_file.path).st_size  # a file swapped for a device or /proc link: named
            except SourceError:
                raise
            except OSError:
                continue
            if size < event_file.offset:  # truncated and rewritten: start over
                event_file.offset = 0
            if size == event_file.offset:
                continue
            # Millions of small acyclic objects would trigger collection after collection for nothing.
            collector_was_enabled = gc.isenabled()
            gc.disable()
            try:
                repeated |= self._read_file(event_file, points, max_points)
            finally:
                if collector_was_enabled:
                    gc.enable()
            if max_points is not None and len(points) >= max_points:
                break
        return repeated

    def _read_file(self, event_file: _EventFile, points: ColumnSink, max_points: int | None) -> bool:
        repeated = False
        prefix = event_file.key_prefix
        chunk_bytes = self.chunk_bytes
        try:
            handle = os.fdopen(open_regular(event_file.path), "rb")
        except OSError:
            return False
        with handle:
            size, budget = os.fstat(handle.fileno()).st_size, LIMITS.max_read_bytes  # bytes per call, then the next
            while budget > 0 and (max_points is None or len(points) < max_points):
                data_end = self._skip_hole(event_file, handle.fileno(), size)
                handle.seek(event_file.offset)
                wanted = _wanted(event_file, chunk_bytes, None if max_points is None else max_points - len(points),
                                 data_end)
                chunk = handle.read(wanted)
                budget -= len(chunk)
                if len(chunk) < HEADER_SIZE:
                    break
                if event_file.resyncing:
                    self._resync(event_file, chunk)
                    if event_file.resyncing and len(chunk) < wanted:
                        break
                    continue
                remaining = None if max_points is None else max_points - len(points)
                before = len(points)
                framed = self._decoder.decode(chunk, prefix, points, remaining)
                if len(points) > before:
                    event_file.bytes_per_point = framed.consumed / (len(points) - before)
                repeated |= framed.repeated
                self.bad_records += framed.bad_records
                event_file.offset += framed.consumed
                if framed.resync:
                    event_file.offset += 1
                    self.skipped_bytes += 1
                    event_file.resyncing = True
                    continue
                if framed.consumed == 0:
                    # Either a half-written tail, or one record larger than the chunk.
                    length = struct.unpack_from("<Q", chunk)[0]
                    needed = HEADER_SIZE + length + 4
                    if event_file.offset + needed > data_end < size:  # a record cut by a hole: damage, resync
                        event_file.offset, event_file.resyncing = event_file.offset + 1, True
                        continue
                    # every written byte is in the chunk (a half-written tail): the rest comes at a later poll;
                    # reading it again would spin until the byte budget (seconds of CPU at every poll)
                    if len(chunk) < wanted or needed <= len(chunk) or event_file.offset + len(chunk) >= data_end:
                        break
                    chunk_bytes = max(chunk_bytes, needed)
                    event_file.bytes_per_point = 0.0
                    continue
                if len(chunk) < wanted:
                    break
        return repeated

    def _skip_hole(self, event_file: _EventFile, fd: int, size: int) -> int:
        """Where the written bytes from the file's offset end; a hole before them (`truncate -s +8G`) is skipped,
        never read, and named as damage (sources/files.py)."""
        start, data_end = data_extent(fd, event_file.offset, size, event_file.path)
        if start > event_file.offset:
            self.skipped_bytes += start - event_file.offset
            event_file.offset, event_file.resyncing = start, True
        return data_end

    def _resync(self, event_file: _EventFile, chunk: bytes) -> None:
        """Move to the next valid header in chunk, or past every offset of it a header could not start at."""
        found = find_next_header(chunk, 0)
        jump = len(chunk) - HEADER_SIZE + 1 if found is None else found
        event_file.offset += jump
        self.skipped_bytes += jump
        event_file.resyncing = found is None


def _wanted(event_file: _EventFile, chunk_bytes: int, points_left: int | None, data_end: int) -> int:
    """How many bytes to read next: a chunk, no more than the points asked for need, never past the next hole."""
    wanted = chunk_bytes
    if points_left is not None and event_file.bytes_per_point:
        wanted = min(chunk_bytes, int(points_left * event_file.bytes_per_point) + 65536)
    return min(wanted, max(HEADER_SIZE, data_end - event_file.offset))
