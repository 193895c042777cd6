"""`monitor --once`: judge once and print it (one line, or one JSON object with --json); the decision is the exit
code. A TensorBoard folder named with --tb that holds several runs' files (an older run's beside the live one's,
several writers of one sweep) is judged as ONE run, the newest writer or the one named with --run, and the
others are named as left out; --all-runs judges each (the worst decision is the exit code)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from guarded_sbatch.core.errors import ExitCode
from guarded_sbatch.core.jsonnum import dumps as json_dumps
from guarded_sbatch.core.waiting import Waiting
from guarded_sbatch.sources.run_sources import SourceSpec

if TYPE_CHECKING:
    from guarded_sbatch.sidecar.plan import WatchPlan

# the decision is the exit code, so a script can branch on it without parsing
ONCE_EXIT = {"CONTINUE": int(ExitCode.OK), "WAIT": int(ExitCode.WAIT), "STOP": int(ExitCode.STOP)}


@dataclass(frozen=True)
class _Judged:
    run: Any  # the FoundRun judged (None: the whole of what was named, one run)
    verdict: Any
    data_source: str
    files: tuple[str, ...]


def judge_runs_once(settings: WatchPlan, named: str | None, all_runs: bool, as_json: bool) -> int:
    from guarded_sbatch.sidecar.one_shot import judge_once
    from guarded_sbatch.sidecar.one_shot_runs import choose, left_out_note, tensorboard_runs

    named_sources = ", ".join([spec.locator for spec in settings.sources] + [str(d) for d in settings.search_dirs])
    with Waiting(f"the metrics of {named_sources or 'the run'} to be read and judged"):  # a large run takes seconds
        settings = _folders_of_several_runs(settings)
        runs = [run for spec in settings.sources if spec.kind == "tensorboard"
                for run in tensorboard_runs(Path(spec.locator))]
        left: list[Any] = []
        if len(runs) > 1 or (named and runs):
            if all_runs:
                chosen = runs
            else:
                one, left = choose(runs, named)
                chosen = [one]
            judged = [_Judged(run, *_judged(judge_once(settings, frozenset(map(str, run.files))))) for run in chosen]
        else:
            judged = [_Judged(runs[0] if runs else None, *_judged(judge_once(settings)))]
    note = left_out_note(left)
    if as_json:
        print(json_dumps(_payload(judged, left)))
    else:
        _print_lines(judged, note, split=len(runs) > 1 or bool(named and runs))
    return max(ONCE_EXIT.get(j.verdict.decision.value, int(ExitCode.OK)) for j in judged)


def _folders_of_several_runs(settings: WatchPlan) -> WatchPlan:
    """A folder to search (`monitor --once DIR`) holding several TensorBoard runs is read as --tb DIR would be: one
    run judged, the others named (the search would take none of them)."""
    from guarded_sbatch.sidecar.one_shot_runs import tensorboard_runs

    if any(spec.kind == "tensorboard" for spec in settings.sources):
        return settings
    several = [folder for folder in settings.search_dirs if len(tensorboard_runs(Path(folder))) > 1]
    added = [SourceSpec("tensorboard", str(folder), "the folder named") for folder in several]
    return replace(settings, sources=[*settings.sources, *added]) if added else settings


def _judged(one: Any) -> tuple[Any, str, tuple[str, ...]]:
    return one.verdict, one.data_source, one.files


def _payload(judged: list[_Judged], left: list[Any]) -> dict[str, Any]:
    entries = [{**j.verdict.to_json(), "data_source": j.data_source, "read": list(j.files),
                **({"run": j.run.to_json()} if j.run is not None else {})} for j in judged]
    if len(judged) == 1:
        return {**entries[0], "left_out": [run.to_json() for run in left]}
    worst = max(judged, key=lambda j: ONCE_EXIT.get(j.verdict.decision.value, int(ExitCode.OK)))
    return {"decision": worst.verdict.decision.value, "runs": entries, "left_out": []}


def _print_lines(judged: list[_Judged], note: str, *, split: bool) -> None:
    """One line per run judged; where a folder held several, each followed by the files it read."""
    from guarded_sbatch.sidecar.report import one_line

    several = len(judged) > 1
    for j in judged:
        prefix = f"{j.run.name()}: " if several and j.run is not None else ""
        print(prefix + one_line(j.verdict, j.data_source))
        if split and j.files:
            print(f"  read: {', '.join(j.files)}")
    if note:
        print(note)
