"""Resolve, at launch, what belongs to this run: its TensorBoard / output folders (config keys and launcher
arguments, `"$@"` already expanded from the script's real arguments), the file or folder of every other kind
named by its keys (each kind's LaunchKind in the registry, sources/kinds.py, as `RunSources.specs`), each tracker
run pinned by an id exported to the job (a kind's `LaunchKind.pin`: W&B's run id, MLflow's tag; a spec of its kind
too), and its own stdout/stderr files. The result goes into the run's record;
the sidecar reads exactly these (sources/run_sources.py)."""

from __future__ import annotations

import getpass
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from guarded_sbatch.sources.place_keys import OUTPUT_KEYS
from guarded_sbatch.sources.run_sources import (
    RunSources,
    SourceSpec,
    WriterIdentity,
    is_pinned,
)
from guarded_sbatch.sbatch.filename_pattern import expand_filename_pattern
from guarded_sbatch.sbatch.array import ArraySpec, parse_array_spec
from guarded_sbatch.sbatch.script_shell import fill_job_variables, needs_shell
from guarded_sbatch.launch.context import PreflightContext
from guarded_sbatch.launch.runconfig import RunConfig
from guarded_sbatch.sources.kind_tensorboard import LAUNCH as TENSORBOARD
from guarded_sbatch.sources.kind_launch import PinContext
from guarded_sbatch.sources.kinds import launch_kinds, place_of

TB_KEYS = TENSORBOARD.path_keys


@dataclass
class SourcePlan:
    """The part known before submission, and the environment the job gets."""

    sources: RunSources
    env: dict[str, str] = field(default_factory=dict)  # exported to the training job
    output_pattern: str = "slurm-%j.out"
    error_pattern: str = ""
    job_name: str = ""
    array: ArraySpec | None = None  # a job array (--array, SBATCH_ARRAY_INX, #SBATCH --array): one run per task
    local: bool = False
    named: list[SourceSpec] = field(default_factory=list)  # each kind's place named by its own keys, any kind
    # (kind, the report's words) for each tracker run pinned by its id
    pinned: list[tuple[str, str]] = field(default_factory=list)
    pin_gaps: list[tuple[str, str]] = field(default_factory=list)  # (kind, why its run could not be pinned)

    def describe(self, used: set[str] | None = None) -> list[str]:
        """Report notes: what the sidecar will read as this run's own, and what it could not pin down. `used`: the
        tracker kinds the run shows signs of (the monitoring check's); a run pinned for a kind the project shows no
        sign of using is not named (its id is exported all the same, should the trainer report to it unseen)."""
        tensorboard = self.sources.places(TENSORBOARD.name)
        own = [f"TensorBoard {spec.locator} ({spec.origin})" for spec in tensorboard]
        own.extend(words for kind, words in self.pinned if used is None or kind in used)
        own.extend(f"{spec.kind} {spec.locator} ({spec.origin})" for spec in self.sources.specs
                   if not is_pinned(spec) and spec not in tensorboard)
        error = f" and {self.error_pattern}" if self.error_pattern else ""
        own.append(f"the job's log {self.output_pattern}{error}")
        tasks = [] if self.array is None else [
            f"a job array of {self.array.count} tasks: a guarded run each, watched by one watcher job; "
            "$SLURM_ARRAY_TASK_ID and %a above are each task's own"]
        return [*tasks, f"the sidecar reads this run's own: {'; '.join(own)}",
                *(f"not pinned to this run: {item}" for item in self.sources.unresolved),
                *(f"not pinned to this run: {why}" for kind, why in self.pin_gaps if used is None or kind in used)]

    def for_job(self, job_id: str, *, since: float | None = None) -> RunSources:
        """The run's sources once its job id is known (%j, $SLURM_JOB_ID filled in). For a task of an array,
        `<job>_<task>`: %A, %a, $SLURM_ARRAY_JOB_ID and $SLURM_ARRAY_TASK_ID are its own; %j and $SLURM_JOB_ID
        (the task's own number, which only the running task knows) stay as written."""
        user = _user()
        node = os.uname().nodename.split(".")[0] if self.local else None
        array_job, _, task = job_id.partition("_") if self.array is not None else (None, "", "")
        own_id = "%j" if task else job_id

        def expand(pattern: str) -> str:
            if not pattern:
                return ""
            text = expand_filename_pattern(pattern, job_id=own_id, job_name=self.job_name, user=user, node=node,
                                           array_job=array_job, array_task=task or "4294967294")
            path = Path(text)
            return str(path if path.is_absolute() else Path(self.sources.workdir) / path)

        def with_job(text: str) -> str:  # both backends set the job's SLURM_* variables alike
            return fill_job_variables(text, job_id="${SLURM_JOB_ID}" if task else job_id, job_name=self.job_name,
                                      array_job=array_job, array_task=task or None)

        sources = self.sources
        return replace(
            sources, since=since if since is not None else sources.since,
            output_dirs=[with_job(p) for p in sources.output_dirs],
            specs=[replace(spec, locator=with_job(spec.locator), search=tuple(map(with_job, spec.search)),
                           writer=replace(spec.writer, run_id=with_job(spec.writer.run_id))) for spec in sources.specs],
            stdout=expand(self.output_pattern), stderr=expand(self.error_pattern),
        )


def plan_run_sources(context: PreflightContext, *, now: float) -> SourcePlan:
    workdir = context.workdir
    sources = RunSources(since=now, workdir=str(workdir))
    env: dict[str, str] = {}
    named, problems = named_places(context)
    # a TensorBoard folder a framework takes from the environment comes before the config's; the config's TensorBoard
    # keys are read with its output folders (_folders: events go under the output folder when no key names one)
    sources.specs.extend(spec for spec in named if spec.kind == TENSORBOARD.name and spec.origin.startswith("$"))
    _folders(context, sources)
    sources.specs.extend(spec for spec in named if spec.kind != TENSORBOARD.name)
    sources.unresolved.extend(problem for kind, problem in problems if kind != TENSORBOARD.name)
    pin_gaps: list[tuple[str, str]] = []
    pinned = _pin_tracker_runs(context, sources, env, pin_gaps)
    options = context.options
    array = parse_array_spec(options.get("array") or "") if options.has("array") else None
    plan = SourcePlan(
        sources=sources, env=env,
        output_pattern=options.get("output") or ("slurm-%A_%a.out" if array else "slurm-%j.out"),
        error_pattern=options.get("error") or "",
        job_name=options.job_name or (context.launch.script.name if context.launch.script else "wrap"),
        array=array, pinned=pinned, pin_gaps=pin_gaps, named=named,
        local=context.scheduler is not None and context.scheduler.traits.process_groups_here,
    )
    return plan


def _folders(context: PreflightContext, sources: RunSources) -> None:
    config = context.intended
    if config is None:
        sources.unresolved.append("no run config or launcher arguments: the run's output folder is unknown")
        return
    found_tb, found_out = _folder_keys(config)
    for label, value in found_out:
        if needs_shell(value, array=context.options.has("array")):
            sources.unresolved.append(f"output folder {value!r} ({label}) needs a shell to expand{_why(context, value)}")
        else:
            sources.output_dirs.append(str(context.resolve(value)))
    # event files go to the TensorBoard folder when one is named, else somewhere under the output folder
    for label, value in found_tb or found_out:
        if needs_shell(value, array=context.options.has("array")):
            if found_tb:
                sources.unresolved.append(f"TensorBoard folder {value!r} ({label}) needs a shell to expand"
                                          f"{_why(context, value)}")
            continue
        path = str(context.resolve(value))
        if path not in {spec.locator for spec in sources.places(TENSORBOARD.name)}:
            sources.specs.append(SourceSpec(TENSORBOARD.name, path, label))
    if not sources.places(TENSORBOARD.name) and not found_tb:
        sources.unresolved.append("no TensorBoard / output folder in the run's config or arguments (logdir, "
                                  "output_dir, ...): TensorBoard files are looked for only if they are clearly "
                                  "this run's")


def named_places(context: PreflightContext) -> tuple[list[SourceSpec], list[tuple[str, str]]]:
    """Every kind's own file or folder named outright (sources/kinds.py: a value of one of its path keys
    in the run's config or launcher arguments, or of one of its path variables in the job's environment), as
    specs; and, by kind, a note for each value that needs a shell to expand."""
    specs: list[SourceSpec] = []
    problems: list[tuple[str, str]] = []
    for kind, origin, value in [*_named_in_env(context), *_named_in_config(context)]:
        if needs_shell(value, array=context.options.has("array")):
            problems.append((kind, f"{kind} {place_of(kind)} {value!r} ({origin}) needs a shell to expand"
                                   f"{_why(context, value)}"))
        else:
            spec = SourceSpec(kind, str(context.resolve(value)), origin)
            if all((s.kind, s.locator) != (spec.kind, spec.locator) for s in specs):
                specs.append(spec)
    return specs, problems


def _named_in_env(context: PreflightContext) -> list[tuple[str, str, str]]:
    """Values of the kinds' path variables, `~` expanded as the frameworks reading them do."""
    return [(kind.name, f"${variable}", os.path.expanduser(context.env.get(variable, "").strip()))
            for kind in launch_kinds() for variable in kind.path_env if context.env.get(variable, "").strip()]


def _named_in_config(context: PreflightContext) -> list[tuple[str, str, str]]:
    config = context.intended
    if config is None:
        return []
    owner: dict[str, str] = {}
    for kind in launch_kinds():
        for key in kind.path_keys:
            owner.setdefault(key, kind.name)
    found = []
    for key, value in config.values.items():
        kind_name = owner.get(key.rsplit(".", 1)[-1].replace("-", "_").lower())
        if kind_name is not None and isinstance(value, str) and value.strip() and "://" not in value:
            found.append((kind_name, f"--{key}" if key in config.overrides else f"config key {key}", value))
    return found


def _folder_keys(config: RunConfig) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """The config's TensorBoard-folder and output-folder values (local paths), each with where it was set."""
    found_tb: list[tuple[str, str]] = []
    found_out: list[tuple[str, str]] = []
    for key, value in config.values.items():
        name = key.rsplit(".", 1)[-1].replace("-", "_").lower()
        if not isinstance(value, str) or not value.strip() or "://" in value:
            continue
        label = f"--{key}" if key in config.overrides else f"config key {key}"
        if name in TB_KEYS:
            found_tb.append((label, value))
        elif name in OUTPUT_KEYS:
            found_out.append((label, value))
    return found_tb, found_out


def _why(context: PreflightContext, value: str) -> str:
    shell = context.script.shell
    reasons = shell.why_unresolved(value) if shell is not None else []
    return f" ({'; '.join(reasons)})" if reasons else ""


def _pin_tracker_runs(context: PreflightContext, sources: RunSources, env: dict[str, str],
                      gaps: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Each kind that pins its run by an id the job is given (sources/kind_launch.py `PinnedRun`): the id exported
    into `env`, the run recorded as a spec of the kind carrying it; what could not be pinned said why."""
    program = context.program_path()
    folders = tuple(dict.fromkeys([str(context.workdir), *([str(program.parent)] if program is not None else [])]))
    job = PinContext(env=context.env, script_text=context.script.text, array=context.options.has("array"),
                     folders=folders, resolve=lambda path: str(context.resolve(path)))
    notes = []
    for kind in launch_kinds():
        pinned = kind.pin(job) if kind.pin is not None else None
        if pinned is None:
            continue
        if pinned.unresolved:
            gaps.append((kind.name, pinned.unresolved))
        if pinned.run_id or pinned.tag:
            env.update(pinned.export)
            export = context.options.get("export")
            if pinned.export and not (export or "ALL").upper().startswith("ALL"):
                gaps.append((kind.name, f"--export={export} keeps {', '.join(pinned.export)} from the job: add "
                                        "them to --export so the sidecar can find the run's own tracker run"))
            sources.specs.append(SourceSpec(kind.name, pinned.locator, pinned.origin,
                                            WriterIdentity(run_id=pinned.run_id, tag=pinned.tag), pinned.search))
            notes.append((kind.name, pinned.note or f"{kind.name} run {pinned.run_id or pinned.tag} ({pinned.origin})"))
    return notes


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "%u"
