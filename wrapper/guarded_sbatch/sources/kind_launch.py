"""The launch side of a kind of metric source, as types: `LaunchKind` (the signs that a program uses the kind,
which the pre-flight's monitoring check looks for, and the config keys, launcher arguments and environment
variables whose value names the run's file or folder of the kind, which the launch resolves into the run's record)
and its `Uses`; a kind whose run is known by an id the job is given (a tracker run id, a tag) declares how the
launch pins it (`pin`: a `PinnedRun` from the job's `PinContext`). Each kind declares its own in its module
(`sources/kind_*.py`); the list of kinds is sources/kinds.py's registry, read by the pre-flight and the launch too.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

# (the config's values, the program's source, the job's environment) -> the kind's settings: project, entity ...
Settings = Callable[[Mapping[str, object], str, Mapping[str, str]], dict[str, str]]
# the run's main tracker's settings -> the monitoring check's ("passed" | "warned" | "failed", finding)
Review = Callable[[Mapping[str, str]], tuple[str, str]]


@dataclass(frozen=True)
class PinContext:
    """What a kind is told to pin the run's own tracker run at launch."""

    env: Mapping[str, str]  # the job's environment as submitted
    script_text: str  # the batch script (a shell line setting the id itself leaves it unpinned)
    array: bool  # a job array: one id exported to every task would make them all one run
    folders: tuple[str, ...]  # the job's folder, then the program's: where a tracker writes unless told
    resolve: Callable[[str], str]  # a path as the job sees it (relative to its folder), absolute


@dataclass(frozen=True)
class PinnedRun:
    """The run's own tracker run, pinned at launch: the id (or tag) the job is given through `export`, recorded as
    the kind's spec (`SourceSpec(kind, locator or run_id, origin, WriterIdentity(run_id, tag), search)`), which
    the sidecar, `show` and `kill` open by that id. No id nor tag: not pinned, and `unresolved` says why."""

    run_id: str = ""  # the tracker's run id the job will use
    tag: str = ""  # a tag the job's run will carry (its id is not known before it starts)
    origin: str = ""  # who chose it: "guarded-sbatch" | "WANDB_RUN_ID set by the user"
    export: Mapping[str, str] = field(default_factory=dict)  # added to the job's environment
    locator: str = ""  # where the run is kept (MLflow: the tracking URI); default: the run id
    search: tuple[str, ...] = ()  # the folders it is looked for under
    note: str = ""  # the launch report's words for it
    unresolved: str = ""  # why it could not be pinned


# the job's context -> its pinned run (None: nothing to say)
Pin = Callable[[PinContext], PinnedRun | None]


@dataclass(frozen=True)
class Uses:
    """Signs in the program or its config, any one of which gives the finding `because`."""

    because: str  # the finding's words; "{where}" is the program's file name
    imports: tuple[str, ...] = ()  # modules the program imports (`import x` / `from x... import`)
    code: tuple[str, ...] = ()  # text anywhere in the program's source (a class name, a call)
    config_words: tuple[str, ...] = ()  # in the config's report_to / logger / loggers / tracker / log_with values
    config_prefixes: tuple[str, ...] = ()  # the start of a config key ("wandb." for wandb.project)
    arg_words: tuple[str, ...] = ()  # in the launcher's program arguments


@dataclass(frozen=True)
class LaunchKind:
    """One kind as the launch sees it (`name` is the registry's name of the kind)."""

    name: str
    env_signs: tuple[str, ...] = ()  # a variable set in the job's environment: "X is set"
    default_folders: tuple[str, ...] = ()  # under the job's folder, where the kind writes unless told: "P exists"
    uses: tuple[Uses, ...] = ()
    path_keys: tuple[str, ...] = ()  # config keys / launcher arguments (last part, `-` as `_`) naming its place
    path_env: tuple[str, ...] = ()  # environment variables naming its place, taken as is
    place: str = "folder"  # what those name: "folder" | "file"
    settings: Settings | None = None  # what the check reports of it (default: where it writes, from its keys)
    review: Review | None = None  # the check's verdict on those settings when it is the main tracker (default: passed)
    pin: Pin | None = None  # the run's own tracker run, pinned by an id the launch exports (None: found by place)

    def signs(self) -> str:
        """A short list of what is looked for, for a report that found none."""
        imports = [f"import {name}" for use in self.uses for name in use.imports]
        code = [text for use in self.uses for text in use.code]
        looked = [*self.env_signs, *(imports or code)[:1], *(f"{d}/" for d in self.default_folders),
                  *(f"config key {key}" for key in self.path_keys[:1])]
        return f"{self.name} ({', '.join(looked)})" if looked else self.name


def call_argument(source: str, prefix: str) -> str | None:
    """The quoted string right after `prefix` (a regular expression) in a program's source, e.g. a run name."""
    match = re.search(prefix + r"[\"']([^\"']+)[\"']", source, re.DOTALL)
    return match.group(1) if match else None
