"""The sidecar's view of a run's metric sources: one list of SourceSpec (named outright, recorded at
launch, or found under a folder), opened through sources/kinds.py, one history per source, and the
highest-priority source that has data is the one judged. What is known of the job's writers (its user,
start, node and processes, learned while it runs) decides which files are its own (sources/writers.py)."""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from guarded_sbatch.core.errors import GuardedError
from guarded_sbatch.records.registry import update_record
from guarded_sbatch.sources.run_sources import RunSources, SourceSpec, WriterIdentity
from guarded_sbatch.judge.history import MetricHistory
from guarded_sbatch.sidecar.crash_confirm import CrashConfirmation
from guarded_sbatch.sidecar.job_writers import HELD_EVERY_S, held_files, job_processes
from guarded_sbatch.sidecar.run_claims import claimed_by_others
from guarded_sbatch.sources import kinds
from guarded_sbatch.sources.base import SourceError
from guarded_sbatch.sources.command_log import CommandLogSource
from guarded_sbatch.sources import discovery
from guarded_sbatch.sources.discovery import claims_below
from guarded_sbatch.sources.files import OUT_OF_MEMORY
from guarded_sbatch.sources.writers import this_host
from guarded_sbatch.sidecar.one_shot_runs import one_run_source
from guarded_sbatch.sidecar.tracker_runs import agent_run_process, has_points, judged_source
from guarded_sbatch.sidecar.source_read import one_line, out_of_memory, read_into, unreachable_path

if TYPE_CHECKING:
    from guarded_sbatch.scheduler.interface import JobInfo, Scheduler
    from guarded_sbatch.sidecar.plan import WatchPlan
    from guarded_sbatch.sources.base import MetricSource


class SourceSet:
    def __init__(self, settings: WatchPlan, scheduler: Scheduler | None, *, live: bool = True,
                 clock: Callable[[], float] = time.time, only_files: frozenset[str] | None = None,
                 info: Callable[[str], JobInfo] | None = None) -> None:
        """`live`: a running job is being watched, so a printed crash is confirmed by silence
        (sidecar/crash_confirm.py); a one-shot read judges the files as they stand. `only_files`: of a TensorBoard
        folder named outright, these event files alone are read (one run of several, sidecar/one_shot_runs.py).
        `info`: where the job's folder and output are learned when not from the scheduler (a watcher of several
        runs, sidecar/loop.py)."""
        self._only = only_files
        self._info = info
        self.settings = settings
        self.crashes = CrashConfirmation(live=live, clock=clock)
        self.scheduler = scheduler
        self.sources: list[MetricSource] = []
        self.histories: dict[int, MetricHistory] = {}  # by id(source): the list is re-sorted
        self.read_error = ""
        self.hard_error = ""
        self.errors: dict[int, str] = {}  # by id(source): why it could not be read at the last poll
        self._stdout: Path | None = None
        self._work_dir: Path | None = None
        self._stdout_size = -1
        self._job_info_loaded = False
        self._opened: set[tuple[str, str]] = set()
        self._abandoned: list[str] = []  # sources read no more (they ran the watcher out of memory), and why
        self.notes: list[str] = []  # points dropped or clamped on the way in (steps outside int64, ...)
        self._job_start: float | None = None
        self._pgid: int | None = None
        self.ownership_note = ""  # candidates seen but not attributable to this run
        self._found_notes: list[str] = []
        self._held: dict[str, int] = {}  # files the job's processes hold open for writing -> the pid holding each
        self._held_ever: dict[str, int] = {}  # every file ever seen held, and by whom
        self._held_at, self._held_pids = float("-inf"), set[int]()  # listed when the job's processes change, or 10 s on
        self._retired: set[int] = set()  # sources (by id) of runs stopped on their own: judged no more
        self._successive: set[int] = set()  # W&B runs (by source id) the job's processes were seen writing
        identity = settings.identity
        self._writer = identity.writer() if identity is not None else WriterIdentity(uid=os.geteuid())
        if self._writer.uid is None:
            self._writer = replace(self._writer, uid=os.geteuid())
        self._saved_writer = self._writer
        # where the sources named outright are, as the file system resolves them now: a recorded or found spec of
        # the same kind and place (the user's link and the folder it points to) is that source again, not a second
        # one; read twice, which one was judged depended on which came first, and the user's own path lost
        self._given_places = {(spec.kind, os.path.realpath(spec.locator)) for spec in settings.sources}

    def job_writer(self) -> WriterIdentity:
        """Who writes this run's files, as known now."""
        return self._writer

    def specs(self) -> list[SourceSpec]:
        """This run's sources as one list: those named outright, then the run's recorded ones."""
        identity = self.settings.identity
        return [*self.settings.sources, *(identity.source_specs() if identity is not None else [])]

    def _load_job_info(self) -> None:
        if self._job_info_loaded or self.scheduler is None or self.settings.job_id is None:
            return
        try:
            info = (self._info or self.scheduler.info)(self.settings.job_id)
        except GuardedError:
            return  # try again next poll
        local = self.scheduler.traits.process_groups_here
        self._job_info_loaded = not (local and info.pgid is None and not info.state.is_terminal)
        self._stdout = Path(info.stdout_path) if info.stdout_path and "%" not in info.stdout_path else None
        self._work_dir = Path(info.work_dir) if info.work_dir else None
        self._job_start = info.start_time
        self._pgid = info.pgid

    def _learn_writers(self) -> None:
        """The job's processes on this host (and, where jobs are process groups here, its node): their event files are
        its own."""
        if self.scheduler is None or self.settings.job_id is None:
            return
        self._load_job_info()
        since = self._writer.since
        if not since and self._job_start and self.settings.identity is None and not self.settings.search_dirs:
            since = self._job_start  # a job's own files are those written since it started
        local = self.scheduler.traits.process_groups_here
        groups = frozenset(self._other_job_groups()) if local and self._pgid is not None else frozenset()
        own, others, nodes, table = job_processes(self.settings.job_id, process_groups=local,
                                                  pgid=self._pgid, other_groups=groups)
        # the job's processes seen here run on these nodes: a file another node wrote is not theirs; a pid in a
        # file is compared with those seen only when its node's processes are in this host's process table
        hosts = (this_host(),) if local else tuple(sorted(nodes))
        writer = self._writer.knowing(hosts=hosts, pids=tuple(sorted(own)), others=tuple(sorted(others)),
                                      pid_hosts=(this_host(), *sorted(table)))
        self._writer = replace(writer, since=since)
        if time.monotonic() >= self._held_at + HELD_EVERY_S or own - self._held_pids:
            self._held, self._held_at, self._held_pids = (held_files(own) if own else {}), time.monotonic(), own
            self._held_ever.update(self._held)
        if self._writer != self._saved_writer and self.settings.identity is not None:
            self._record_seen()

    def _other_job_groups(self) -> set[int]:
        if self.scheduler is None:
            return set()
        try:
            return {g for job, g in self.scheduler.job_process_groups().items() if job != self.settings.job_id}
        except (OSError, GuardedError):
            return set()  # next poll

    def _record_seen(self) -> None:
        """Keep what was learned in the run's record, so `show` after the end tells the same files apart."""
        run_dir = self.settings.state_file.parent
        if not (run_dir / "run.json").is_file():
            return
        seen = replace(self._writer, uid=None, since=0.0).to_json()

        def change(data: dict[str, Any]) -> None:
            sources = data.get("sources")
            if isinstance(sources, dict):
                sources["seen"] = seen

        try:
            update_record(run_dir, change)
            self._saved_writer = self._writer
        except (OSError, GuardedError):
            pass  # next poll

    def _add(self, source: MetricSource) -> None:
        key = (source.kind, source.describe())
        if key not in self._opened:
            self.sources.append(source)
            self._opened.add(key)

    def _open(self, spec: SourceSpec, *, given: bool) -> None:
        """Open a spec once it has something to read; a spec whose files are not written yet is tried again."""
        key = ("spec", f"{spec.kind}:{spec.locator}:{spec.writer.run_id}:{spec.writer.tag}")
        if key in self._opened:
            return
        if not given and self._given_places and (spec.kind, os.path.realpath(spec.locator)) in self._given_places:
            self._opened.add(key)
            return
        if given and self._only is not None and spec.kind == "tensorboard":
            opened = [one_run_source(spec.locator, self._only)]
        else:
            opened = kinds.open_given(spec, self.job_writer) if given else kinds.open_spec(spec, self.job_writer)
        for source in opened:
            self._add(source)
            if spec.kind == "wandb" and spec.origin.startswith(discovery.HELD_ORIGIN):
                self._successive.add(id(source))
        if opened:
            self._opened.add(key)

    def _ensure_sources(self) -> None:
        self._learn_writers()
        errors: list[str] = []
        for spec in self.settings.sources:  # named outright: may not exist yet (the trainer creates them)
            try:
                self._open(spec, given=True)
            except GuardedError as exc:
                errors.append(one_line(exc))
        for index, command in enumerate(self.settings.log_commands):
            if ("command", command) not in self._opened:
                spool = self.settings.state_file.parent / f"command-log-{index}.log"
                self.sources.append(CommandLogSource(command, spool, timeout_s=self.settings.log_command_timeout_s))
                self._opened.add(("command", command))
        notes: list[str] = []
        identity = self.settings.identity
        if identity is not None:
            self._ensure_own_sources(identity, notes)
        elif not (self.settings.sources or self.settings.log_commands) or self.settings.search_dirs:
            self._load_job_info()
            roots = list(self.settings.search_dirs) or ([self._work_dir] if self._work_dir else [])
            since = self._writer.since or None
            for spec in discovery.held_specs(self._held, []):
                self._open(spec, given=False)
            for root in roots:
                specs, note = discovery.discover(root, since=since, claimed=self._claimed_by_others() if since else (),
                                                 job=self._known_job())
                for spec in specs:
                    self._open(spec, given=False)
                notes.append(note)
            if self._stdout is not None and self._stdout.is_file():
                self._open(SourceSpec("textlog", str(self._stdout), "the job's stdout"), given=False)
        self.sources.sort(key=lambda s: kinds.priority(s.kind))
        self._found_notes = [n for n in notes if n]
        if errors:
            raise GuardedError(errors[0])

    def _ensure_own_sources(self, identity: RunSources, notes: list[str]) -> None:
        """A guarded run: exactly the sources its record names; discovery only where the record is silent,
        and then only files written since the run started that no other guarded run claims."""
        self._load_job_info()
        if self._stdout is not None:
            self._open(SourceSpec("textlog", str(self._stdout), "the job's stdout", self._writer), given=False)
        specs = self.specs()
        for spec in specs[len(self.settings.sources):]:
            self._open(spec, given=False)
        held = discovery.held_specs(self._held, specs)  # what the job's processes write, wherever it lies
        for spec in held:
            self._open(spec, given=False)
        specs = [*specs, *held]
        found, note = discovery.discover_unnamed(Path(identity.workdir), specs, since=identity.since,
                                                claimed=self._claimed_by_others(), job=self._known_job())
        for spec in found:
            self._open(spec, given=False)
        notes.append(note)
        beside = kinds.found_in_run_folders()
        if not (beside and any(kinds.names_run_folder(spec.kind) for spec in specs)):
            return
        # the run's own folders are known: what else it writes there (a kind declared `in_run_folders`, such as a
        # Lightning CSVLogger's metrics.csv), looked for until a source that ranks as high has data
        judged = self._active()
        if judged is not None and kinds.priority(judged.kind) <= max(kinds.priority(kind) for kind in beside):
            return
        others = self._claimed_by_others()
        for folder in dict.fromkeys([*(s.locator for s in identity.places("tensorboard")), *identity.output_dirs]):
            found, note = discovery.discover(Path(folder), since=identity.since,
                                            claimed=claims_below(folder, others), kinds=beside)
            for spec in found:
                self._open(spec, given=False)
            notes.append(note)

    def _known_job(self) -> WriterIdentity | None:
        """The job's writer once any of its processes is known (a folder read by hand has none)."""
        return self._writer if self._writer.pids or self._writer.others else None

    def _claimed_by_others(self) -> list[str]:
        """Folders other guarded runs call their own (theirs even when written since this run started)."""
        return claimed_by_others(self.settings.job_id)  # the records read once for every run of a watcher

    def read(self) -> int:
        """Read every source; return the number of new points of the active one."""

        self.read_error = ""
        self.hard_error = ""  # a source that is there but cannot be read (a FIFO, garbage): no start-up grace
        self.errors = {}
        try:
            self._ensure_sources()
        except Exception as exc:  # noqa: BLE001 - discovery failing must leave the sidecar running
            self.read_error = one_line(exc)
        before = self._active()
        added: dict[int, int] = {}
        for source in self.sources:
            history = self.histories.setdefault(id(source), MetricHistory())
            had_data = bool(len(history))
            failures: list[Exception] = []
            notes: list[str] = []
            added[id(source)] = read_into(history, source, failures, notes)
            if notes:
                self.notes = [*self.notes, *notes][-20:]
            if failures:
                self.read_error = self.errors[id(source)] = one_line(failures[0], source.describe)
                if not (isinstance(failures[0], SourceError) and failures[0].missing):
                    self.hard_error = self.read_error
                if out_of_memory(failures[0]):
                    self._abandon(source, self.read_error)
                continue
            missing = unreachable_path(source, had_data=had_data)
            if missing:  # readers skip a vanished folder silently; the judge must know it is blind
                self.read_error = self.errors[id(source)] = f"{source.describe()}: {missing}"
        if self._abandoned:  # said at every poll, first: what the watcher no longer reads
            self.read_error = self.hard_error = "; ".join(dict.fromkeys([*self._abandoned, *filter(None, [self.read_error])]))
        notes = [*self._found_notes, *(source.ownership_note() for source in self.sources)]
        self.ownership_note = "; ".join(n for n in notes if n)
        active = self._active()
        if active is not None:
            self.crashes.note_poll(self._log_histories(), added.get(id(active), 0) if active is before else 0)
        if active is None:
            if self.ownership_note and not self.read_error:  # WAIT, naming what was seen but not read
                self.read_error = f"found metrics that may not be this run's: {self.ownership_note}"
            return 0
        return added.get(id(active), 0) if active is before else len(self.histories[id(active)])

    def _abandon(self, source: MetricSource, error: str) -> None:
        """A source that ran the watcher out of memory is read no more and its points are let go: a poll that
        read it again would fail the same way, and a watcher without memory cannot even see its job end."""
        self.sources = [s for s in self.sources if s is not source]
        self.histories.pop(id(source), None)
        self._abandoned.append(f"{error} — {OUT_OF_MEMORY} (far more series or points than a watcher holds?): no "
                               "longer read, the run is watched on its other sources")
        gc.collect()

    def _log_histories(self) -> list[tuple[MetricSource, MetricHistory]]:
        """The sources that read what the job printed, with their histories."""
        return [(source, self.histories[id(source)]) for source in self.sources
                if source.log_file() is not None and id(source) in self.histories]

    def _active(self) -> MetricSource | None:
        """The highest-priority source that has produced points (of a job's several W&B runs, the newest:
        sidecar/tracker_runs.py)."""
        return judged_source([s for s in self.sources if has_points(self.histories.get(id(s)))], self._retired,
                             self._successive)

    def agent_process(self) -> int | None:
        """The process a sweep agent started for the judged W&B run (sidecar/tracker_runs.py), else None."""
        active = self._active()
        holder = self._held_ever.get(active.describe()) if active is not None and active.kind == "wandb" else None
        return agent_run_process(holder, self._writer.pids) if holder is not None else None

    def retire_active(self) -> None:
        """The judged run was stopped on its own (one of an agent's runs): judged no more, the job's next is."""
        active = self._active()
        if active is not None:
            self._retired.add(id(active))

    def judged_files(self) -> list[str]:
        """The judged source's files: who else can write them and their holes bear on the verdict (core/file_trust.py)."""
        active = self._active()
        try:
            return active.files_inspected() if active is not None else []
        except (GuardedError, OSError):
            return []

    @property
    def active_error(self) -> str:
        """Why the judged source could not be read at the last poll ("" when it could)."""
        active = self._active()
        return self.errors.get(id(active), "") if active is not None else ""

    @property
    def active_kind(self) -> str | None:
        active = self._active()
        return active.kind if active is not None else None

    def history(self) -> MetricHistory:
        """The judged source's history, with the crashes the job printed in it (whichever source is judged)."""
        active = self._active()
        if active is None:
            return MetricHistory()
        judged = self.histories[id(active)]
        self.crashes.settle(self._log_histories(), judged)
        return judged

    def describe(self) -> str:
        source = self._active()
        if source is None:
            return "no metrics found yet"
        return source.run_label()  # W&B: entity/project/run id

    def files_inspected(self) -> list[str]:
        files: list[str] = []
        for source in self.sources:
            try:
                files.extend(source.files_inspected())
            except (GuardedError, OSError):
                continue
        return files

    def stdout_path(self) -> Path | None:
        if self._stdout is not None:
            return self._stdout
        # a log named outright, or our copy of what a log command printed
        return next((log for log in (s.log_file() for s in self.sources) if log is not None), None)

    def stdout_grew(self) -> bool:
        path = self.stdout_path()
        if path is None:
            return False
        try:
            size = os.stat(path).st_size
        except OSError:
            return False
        grew = size != self._stdout_size
        self._stdout_size = size
        return grew

    def wandb_run_info(self) -> dict[str, str] | None:
        """run_path (entity/project/id) and run_dir of the W&B run being judged, once its log says."""
        source = self._active()
        run = source.tracker_run() if source is not None else None
        return {"run_path": run.run_path, "run_dir": run.run_dir} if run is not None else None
