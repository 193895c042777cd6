"""What belongs to one run, resolved at launch and kept in its record: the sidecar reads exactly these
and nothing of a neighbour's (its TensorBoard folders, its W&B run id, the tag on its MLflow run, its
stdout/stderr files, and the time before which no file can be its own).

The one model of "this run's sources" is a list of `SourceSpec(kind, locator, origin, writer)`:
`RunSources.source_specs()` gives it for a record (every place the launch resolved is a spec of its kind, the
TensorBoard folders included; the job's stdout / stderr become specs there, and only there; a tracker run pinned by
the id the job was given is a spec of its kind like any other),
`specs_from_flags` for paths a person names, and the sidecar, the shared monitor, `show`, `status` and
`kill`/`restart` all read that list. `WriterIdentity` says who may have written a file of the run; `attribute()`
decides whether one file is the run's own.
"""

from __future__ import annotations

import enum
import math
from dataclasses import asdict, dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from guarded_sbatch.records.registry import RunRecord

@dataclass(frozen=True)
class WriterIdentity:
    """Who writes a run's files, as far as it is known: the job's user, the node(s) it runs on, its
    processes, when it started, and the tracker run id (or MLflow tag) it was given. Empty: not known."""

    uid: int | None = None
    hosts: tuple[str, ...] = ()  # short host names (TensorBoard puts the writer's in the file name)
    pids: tuple[int, ...] = ()  # the job's processes seen in the process table of pid_hosts
    pid_hosts: tuple[str, ...] = ()  # the hosts whose processes that table holds (a pid means nothing elsewhere)
    others: tuple[int, ...] = ()  # processes of other jobs in that table: their files are not this run's
    since: float = 0.0  # epoch seconds: a file created earlier is not this run's
    run_id: str = ""  # W&B: the run id the job was given (its log must carry it); MLflow: the run id
    tag: str = ""  # a tag the job's run carries (MLflow: sources/kind_mlflow.py's MLFLOW_TAG)

    def to_json(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items() if v not in ((), "", None)}

    @classmethod
    def from_json(cls, raw: object) -> WriterIdentity:
        if not isinstance(raw, dict):
            return cls()
        uid = raw.get("uid")
        return cls(uid=uid if isinstance(uid, int) and not isinstance(uid, bool) else None,
                   hosts=tuple(h for h in _list(raw.get("hosts")) if isinstance(h, str)),
                   pids=tuple(p for p in _list(raw.get("pids")) if isinstance(p, int) and not isinstance(p, bool)),
                   pid_hosts=tuple(h for h in _list(raw.get("pid_hosts")) if isinstance(h, str) and h),
                   others=tuple(p for p in _list(raw.get("others")) if isinstance(p, int) and not isinstance(p, bool)),
                   since=_number(raw.get("since")),
                   run_id=_text(raw.get("run_id")), tag=_text(raw.get("tag")))

    def knowing(self, *, hosts: tuple[str, ...] = (), pids: tuple[int, ...] = (), others: tuple[int, ...] = (),
                pid_hosts: tuple[str, ...] = ()) -> WriterIdentity:
        """The same writer, with hosts and processes learned while the job runs."""
        own = tuple(dict.fromkeys((*self.pids, *pids)))
        return replace(self, hosts=tuple(dict.fromkeys((*self.hosts, *hosts))), pids=own,
                       others=tuple(p for p in dict.fromkeys((*self.others, *others)) if p not in own),
                       pid_hosts=tuple(dict.fromkeys((*self.pid_hosts, *pid_hosts))))


@dataclass(frozen=True)
class SourceSpec:
    """One source of a run: which reader (`kind`, a name in sources/kinds.py), where (`locator`: a path,
    a W&B run path/URL, an MLflow store), where that came from (`origin`, for the report), who writes it
    (`writer`) and, for a locator known only by id, the folders it is looked for under (`search`)."""

    kind: str
    locator: str
    origin: str = ""
    writer: WriterIdentity = field(default_factory=WriterIdentity)
    search: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        raw: dict[str, Any] = {"kind": self.kind, "locator": self.locator}
        if self.origin:
            raw["origin"] = self.origin
        if self.writer != WriterIdentity():
            raw["writer"] = self.writer.to_json()
        if self.search:
            raw["search"] = list(self.search)
        return raw

    @classmethod
    def from_json(cls, raw: object) -> SourceSpec | None:
        """A spec from a record; None for an entry that is not one (a hand-edited record)."""
        if not isinstance(raw, dict) or not isinstance(raw.get("kind"), str) or not raw["kind"]:
            return None
        return cls(kind=raw["kind"], locator=_text(raw.get("locator")), origin=_text(raw.get("origin")),
                   writer=WriterIdentity.from_json(raw.get("writer")),
                   search=tuple(s for s in _list(raw.get("search")) if isinstance(s, str)))


class Attribution(enum.Enum):
    OWN = "own"  # written by this run's job
    FOREIGN = "foreign"  # written by someone else (another user, an older run, another node or process)
    UNKNOWN = "unknown"  # could be this run's or a neighbour's: read only when it is the one candidate


@dataclass(frozen=True)
class FileWriter:
    """What a file says of its writer: its owner, and (TensorBoard) the host and pid in its name."""

    uid: int | None
    created: float
    host: str = ""
    pid: int | None = None


def attribute(writer: WriterIdentity, found: FileWriter) -> tuple[Attribution, str]:
    """Whether a file is the run's own, and why not. A pid is compared only on the host where the job's
    processes were seen; a pid of neither the job nor another job (a container's own pid space, a process
    never seen) leaves the file UNKNOWN."""
    if writer.uid is not None and found.uid is not None and found.uid != writer.uid:
        return Attribution.FOREIGN, f"owned by uid {found.uid}, not the job's user (uid {writer.uid})"
    if writer.since and found.created < math.floor(writer.since):  # TensorBoard names hold whole seconds
        return Attribution.FOREIGN, "created before the run started"
    if writer.hosts and found.host and _short(found.host) not in {_short(h) for h in writer.hosts}:
        return Attribution.FOREIGN, f"written on {found.host}, not on the job's node ({', '.join(writer.hosts)})"
    same_host = not writer.pid_hosts or not found.host or _short(found.host) in {_short(h) for h in writer.pid_hosts}
    if found.pid is not None and same_host:
        if found.pid in writer.pids:
            return Attribution.OWN, ""
        if found.pid in writer.others:
            return Attribution.FOREIGN, f"written by process {found.pid}, another job's"
    return Attribution.UNKNOWN, ""


def _short(host: str) -> str:
    return host.split(".")[0].lower()


@dataclass
class RunSources:
    since: float = 0.0  # epoch seconds: a file created earlier is not this run's
    workdir: str = ""
    output_dirs: list[str] = field(default_factory=list)
    stdout: str = ""  # expanded, except %N on Slurm (the node is known only once it runs)
    stderr: str = ""
    unresolved: list[str] = field(default_factory=list)  # what could not be pinned down, and why
    # each kind's place resolved at launch (its keys, launcher arguments, variables: the run's own TensorBoard
    # folders too), and each tracker run pinned by the id (or tag) the job was given (LaunchKind.pin: its writer
    # carries the id)
    specs: list[SourceSpec] = field(default_factory=list)
    uid: int | None = None  # the job's user: a file another uid owns is never read
    seen: WriterIdentity = field(default_factory=WriterIdentity)  # the job's node and processes, as its sidecar saw them

    def to_json(self) -> dict[str, Any]:
        raw = asdict(self)
        raw["specs"] = [spec.to_json() for spec in self.specs]
        raw["seen"] = self.seen.to_json()
        return raw

    @classmethod
    def from_json(cls, raw: object) -> RunSources | None:
        """Tolerant of a hand-edited record (fields missing or of another type are left at their defaults)."""
        if not isinstance(raw, dict) or not raw:
            return None
        defaults = asdict(cls())
        values: dict[str, Any] = {}
        for f in fields(cls):
            if f.name not in raw:
                continue
            value, default = raw[f.name], defaults[f.name]
            if f.name == "specs":
                values["specs"] = [s for s in map(SourceSpec.from_json, _list(value)) if s is not None]
            elif f.name == "seen":
                values["seen"] = WriterIdentity.from_json(value)
            elif f.name == "uid":
                values["uid"] = value if isinstance(value, int) and not isinstance(value, bool) else None
            elif isinstance(default, list):
                values[f.name] = [str(v) for v in _list(value) if isinstance(v, str)]
            elif isinstance(default, float):
                values[f.name] = _number(value)
            elif isinstance(value, str):
                values[f.name] = value
        return cls(**values)

    def writer(self, *, run_id: str = "", tag: str = "") -> WriterIdentity:
        return replace(self.seen, uid=self.uid, since=self.since, run_id=run_id, tag=tag)

    def source_specs(self) -> list[SourceSpec]:
        """Every source of the run as one list: the launch's own fields converted here, in one place."""
        specs = [spec if not _bare(spec.writer) else replace(spec, writer=self.writer(run_id=spec.writer.run_id,
                                                                                        tag=spec.writer.tag))
                 for spec in self.specs]
        for path, origin in ((self.stdout, "the job's stdout"), (self.stderr, "the job's stderr")):
            if path and path not in {s.locator for s in specs if s.kind == "textlog"}:
                specs.append(SourceSpec("textlog", path, origin, self.writer()))
        return _unique(specs)

    def claimed_folders(self) -> list[str]:
        """The folders (and files) this run calls its own: a neighbour never reads them, even when written since it
        started. Every recorded spec's place is one (the launch resolves them to absolute paths)."""
        return [*self.output_dirs, *(s.locator for s in self.specs if s.locator.startswith("/") and not is_pinned(s))]

    def places(self, kind: str) -> list[SourceSpec]:
        """The places of `kind` the launch resolved (not a tracker run pinned by its id), in the order found."""
        return [spec for spec in self.specs if spec.kind == kind and not is_pinned(spec)]

    def pinned(self, kind: str) -> SourceSpec | None:
        """The tracker run of `kind` pinned at launch by the id (or tag) the job was given, if any."""
        return next((spec for spec in self.specs if spec.kind == kind and is_pinned(spec)), None)


def is_pinned(spec: SourceSpec) -> bool:
    """A spec known by the id (or tag) its job was given rather than by its place (a store holds every job's runs)."""
    return bool(spec.writer.run_id or spec.writer.tag)


def _bare(writer: WriterIdentity) -> bool:
    """A writer recorded at launch: nothing of the job known yet, at most the id it was given."""
    return writer == WriterIdentity(run_id=writer.run_id, tag=writer.tag)


def recorded_sources(record: RunRecord) -> RunSources:
    """A guarded run's RunSources; a record without them (written by hand) gets its submit folder and time."""
    return RunSources.from_json(record.sources) or RunSources(workdir=record.submit_dir, since=record.submitted_at)


def flagged_specs(record: RunRecord) -> list[SourceSpec]:
    """The sources named with guard flags at launch (--guard-tb / --guard-wandb / --guard-log, kept in the
    record beside `sources`)."""
    return specs_from_flags({"tensorboard": record.tb_paths, "wandb": record.wandb_paths,
                             "textlog": record.log_paths}, origin="a guard flag at launch",
                            writer=recorded_sources(record).writer())


def run_specs(record: RunRecord) -> list[SourceSpec]:
    """Every source of a guarded run: named with guard flags, then recorded at launch."""
    return _unique([*flagged_specs(record), *recorded_sources(record).source_specs()])


def specs_from_flags(paths: dict[str, list[Any]], *, origin: str = "given on the command line",
                     writer: WriterIdentity | None = None) -> list[SourceSpec]:
    """Specs for paths a person named, by kind (monitor's --tb / --wandb / --log / every registered flag)."""
    return [SourceSpec(kind, str(path), origin, writer or WriterIdentity())
            for kind, given in paths.items() for path in given]


def _unique(specs: list[SourceSpec]) -> list[SourceSpec]:
    seen: set[tuple[str, str]] = set()
    kept = []
    for spec in specs:
        if (spec.kind, spec.locator) not in seen:
            seen.add((spec.kind, spec.locator))
            kept.append(spec)
    return kept


def _list(value: object) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else []


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _number(value: object) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) else 0.0
