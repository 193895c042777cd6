"""Check 4: which tracker the run reports to, and whether its project / entity / name / tags are set."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from guarded_sbatch.core.fsutil import read_bounded
from guarded_sbatch.sources.run_sources import SourceSpec
from guarded_sbatch.sources.kind_launch import LaunchKind, Uses
from guarded_sbatch.sources.kind_tensorboard import LAUNCH as TENSORBOARD
from guarded_sbatch.launch.context import PreflightContext
from guarded_sbatch.launch.fsinfo import timed_stats
from guarded_sbatch.launch.results import CheckName, CheckResult, CheckStatus
from guarded_sbatch.launch.source_plan import SourcePlan
from guarded_sbatch.sources.kinds import launch_kinds

NAME = CheckName.MONITORING.value
MAX_SOURCE_BYTES = 1024 * 1024
IMPORT = r"^\s*(?:import|from)\s+{}\b"
REPORT_TO_KEYS = ("report_to", "logger", "loggers", "tracker", "log_with")
# `wandb agent [options] SWEEP` in the batch script: W&B's sweep agent, which starts the runs itself
WANDB_AGENT = re.compile(r"^\s*(?:exec\s+)?(?:\S*/)?wandb\s+agent\s+(.*)$")


@dataclass
class Tracker:
    kind: str  # a kind of sources/kinds.py: "wandb" | "neptune" | "mlflow" | "tensorboard" | "csv" | an added one
    because: list[str] = field(default_factory=list)
    settings: dict[str, str] = field(default_factory=dict)  # project, entity, name, tags, group, experiment, log_dir, file


def program_source(context: PreflightContext) -> tuple[Path | None, str]:
    launcher = context.launcher
    if launcher is None:
        return None, ""
    if launcher.is_module:
        path = context.workdir / (launcher.program.replace(".", "/") + ".py")
    else:
        path = context.resolve(launcher.program)
    outcome = timed_stats([path], context.config.stat_timeout_s)[0]
    if not outcome.exists or outcome.is_dir:
        return path, ""
    try:
        return path, read_bounded(path, MAX_SOURCE_BYTES, head=True).decode("utf-8", errors="replace")
    except OSError:
        return path, ""


@dataclass(frozen=True)
class _Seen:
    """What the detection looks at, gathered once: the program's source, the config, the launcher's arguments,
    the default folders that exist, and the places the launch resolved for each kind (its source plan)."""

    env: Mapping[str, str]
    source: str
    where: str  # the program's file name, for the findings
    values: dict[str, object]
    report_to: str  # the config's report_to / logger / ... values and accelerate's --log_with, lower case
    args: str  # the launcher's program arguments, lower case
    folders: dict[str, Path]  # default folder name -> its path, for those that exist
    named: tuple[SourceSpec, ...]

    @classmethod
    def of(cls, context: PreflightContext) -> _Seen:
        source_path, source = program_source(context)
        values = context.intended.values if context.intended else {}
        launcher = context.launcher
        report_to = " ".join(str(v) for k, v in values.items() if k.rsplit(".", 1)[-1] in REPORT_TO_KEYS)
        report_to += " " + ((launcher.option("log_with") or "") if launcher else "")
        candidates = list(dict.fromkeys(d for kind in launch_kinds() for d in kind.default_folders))
        stats = timed_stats([context.workdir / d for d in candidates], context.config.stat_timeout_s)
        plan = context.source_plan
        return cls(env=context.env, source=source, where=source_path.name if source_path else "the program",
                   values=values, report_to=report_to.lower(),
                   args=" ".join(w.text for w in launcher.program_args).lower() if launcher else "",
                   folders={d: o.path for d, o in zip(candidates, stats) if o.exists and o.is_dir},
                   named=tuple(plan.named) if isinstance(plan, SourcePlan) else ())

    def because(self, kind: LaunchKind) -> list[str]:
        found = [f"{variable} is set" for variable in kind.env_signs if self.env.get(variable)]
        found += [f"{spec.origin} names its {kind.place} {spec.locator}" for spec in self.named if spec.kind == kind.name]
        found += [f"{self.folders[d]} exists" for d in kind.default_folders if d in self.folders]
        return found + [use.because.format(where=self.where) for use in kind.uses if self.shows(use)]

    def shows(self, use: Uses) -> bool:
        return (any(re.search(IMPORT.format(re.escape(name)), self.source, re.MULTILINE) for name in use.imports)
                or any(text in self.source for text in use.code)
                or any(word in self.report_to for word in use.config_words)
                or any(key.startswith(use.config_prefixes) for key in self.values)
                or any(word in self.args for word in use.arg_words))

    def place(self, kind: LaunchKind) -> str:
        """Where the kind writes, as far as the launch knows: the place its keys name, else its default folder."""
        places = [*(spec.locator for spec in self.named if spec.kind == kind.name),
                  *(str(self.folders[d]) for d in kind.default_folders if d in self.folders)]
        return places[0] if places else ""


def detect_trackers(context: PreflightContext) -> list[Tracker]:
    """The kinds the run reports to, in the table's order (sources/kinds.py, every registered kind)."""
    seen = _Seen.of(context)
    trackers: list[Tracker] = []
    for kind in launch_kinds():
        tracker = Tracker(kind.name, seen.because(kind))
        if tracker.because:
            tracker.settings = _settings(kind, seen, context)
            trackers.append(tracker)
    return trackers


def _settings(kind: LaunchKind, seen: _Seen, context: PreflightContext) -> dict[str, str]:
    if kind.settings is not None:  # a kind's own settings (project, entity, experiment ...), its declaration's
        environ = {**context.env, **_agent_env(context)} if kind.name == "wandb" else context.env
        return kind.settings(seen.values, seen.source, environ)
    place = seen.place(kind)
    return {("log_dir" if kind.place == "folder" else "file"): place} if place else {}


def _agent_env(context: PreflightContext) -> dict[str, str]:
    """What `wandb agent ENTITY/PROJECT/SWEEP` (or `-p PROJECT -e ENTITY SWEEP`) in the script gives each run it
    starts: WANDB_PROJECT and WANDB_ENTITY, the sweep's (its variables expanded as the job sees them)."""
    shell = context.script.shell
    known = shell.known() if shell is not None else dict(context.env)
    for line in context.script.text.splitlines():
        found = WANDB_AGENT.match(line.split(" #", 1)[0])
        if not found:
            continue
        words = [re.sub(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", lambda m: known.get(m.group(1), m.group(0)), word)
                 for word in found.group(1).replace('"', " ").replace("'", " ").split()]
        given: dict[str, str] = {}
        sweep = ""
        pending = ""
        for word in words:
            if pending:
                given[pending], pending = word, ""
            elif word in ("-p", "--project", "-e", "--entity"):
                pending = "WANDB_PROJECT" if word in ("-p", "--project") else "WANDB_ENTITY"
            elif word.startswith(("--project=", "--entity=")):
                given["WANDB_PROJECT" if word.startswith("--project=") else "WANDB_ENTITY"] = word.split("=", 1)[1]
            elif word in ("--count", "-t", "--term-timeout", "--max-consecutive-failed-runs"):
                pending = "_"
            elif not word.startswith("-"):
                sweep = word
        parts = sweep.split("/")
        if len(parts) == 3 and all(parts) and "$" not in sweep:
            given.setdefault("WANDB_ENTITY", parts[0])
            given.setdefault("WANDB_PROJECT", parts[1])
        given.pop("_", None)
        return {name: value for name, value in given.items() if "$" not in value}
    return {}


def _no_tracker(context: PreflightContext) -> CheckResult:
    """The job's own stdout/stderr is always there and the sidecar reads the common trainers' log lines; it also
    reads TensorBoard events under the run's output folder, should the run write any (the source plan's)."""
    stdout = context.options.get("output") or "slurm-%j.out"
    plan = context.source_plan
    folders = [f"{spec.locator} ({spec.origin})" for spec in plan.sources.places(TENSORBOARD.name)] \
        if isinstance(plan, SourcePlan) else []
    if folders:
        finding = (f"no tracker named in the program or its config: the sidecar watches the job's own log ({stdout}) "
                   f"and any TensorBoard events the run writes under {', '.join(folders)}; without them it can judge "
                   "only what the trainer prints (loss / eval lines)")
    else:
        finding = (f"no tracker found: the sidecar watches the job's own log ({stdout}) and the metrics files the "
                   "job's processes hold open for writing (CSV, JSON lines, TensorBoard events), found once it runs; "
                   "a run where neither shows a loss is shown UNGUARDED")
    return CheckResult(NAME, CheckStatus.PASSED, finding,
                       (f"not found: {', '.join(kind.signs() for kind in launch_kinds())}",),
                       {"trackers": [{"kind": "stdout", "settings": {"output": stdout}}]})


def check_monitoring(context: PreflightContext) -> CheckResult:
    trackers = detect_trackers(context)
    if not trackers:
        return _no_tracker(context)
    evidence = [
        f"{t.kind}: {'; '.join(t.because)}" + (f" — {', '.join(f'{k}={v}' for k, v in t.settings.items())}" if t.settings else "")
        for t in trackers
    ]
    main = trackers[0]
    details: dict[str, object] = {"trackers": [{"kind": t.kind, "settings": t.settings} for t in trackers]}
    kind = next((k for k in launch_kinds() if k.name == main.kind), None)
    if kind is not None and kind.review is not None:  # the kind's own word on its settings (W&B: a project ...)
        status, finding = kind.review(main.settings)
        return CheckResult(NAME, CheckStatus(status), finding, tuple(evidence), details)
    return CheckResult(NAME, CheckStatus.PASSED, f"tracker {main.kind} found", tuple(evidence), details)
