"""Finished guarded runs as references: `guarded-sbatch reference RUN` names one for its config family, and a
run that finished healthy is the default reference of its family when the project has no other.

A config family is the run's config file (its resolved path). Each guarded run keeps a snapshot of the config
it was launched with (config.json in its run folder), so an edited config file does not change the reference.
A launch with no config file has its launcher line as its config (launch/launcher_config.py) and its program as
its family: the family's last runs are kept in references/launch-<key>.json (a bounded list, so finding the
reference reads a few records, never the whole registry).
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from pathlib import Path
from typing import Any

from guarded_sbatch.core.errors import UsageError
from guarded_sbatch.core.fsutil import read_json, state_dir, update_json, write_json_atomic
from guarded_sbatch.core.redact import redact_tree
from guarded_sbatch.records.registry import SIDECAR_STATE, RunRecord, runs_root
from guarded_sbatch.launch.checks.run_name import run_name_of
from guarded_sbatch.launch.context import PreflightContext
from guarded_sbatch.launch.launcher_config import family_of, launcher_config, wants_launcher_config
from guarded_sbatch.launch.reference_search import Reference, similarity
from guarded_sbatch.launch.runconfig import RunConfig

SNAPSHOT = "config.json"
FAMILY_RUNS_KEPT = 20  # a launch family's last runs looked at for its reference
PROJECT_RUNS_KEPT = 50  # a project folder's last runs looked at for its reference (a few records, never the registry)


def family_key(config_path: str | Path) -> str:
    resolved = str(Path(config_path).resolve())
    return hashlib.sha1(resolved.encode()).hexdigest()[:16]


def references_dir() -> Path:
    return state_dir() / "references"


def save_config_snapshot(record: RunRecord, intended: RunConfig | None) -> None:
    """Keep the config the run was launched with (overrides applied) beside its record."""
    if intended is None:
        return
    write_json_atomic(record.folder / SNAPSHOT, redact_tree({  # never a config's secrets in clear
        "path": str(intended.path) if intended.path else "", "values": _plain(intended.values),
        "overrides": _plain(intended.overrides), "files": [str(f) for f in intended.files],
    }))
    program = family_of(intended)
    if program is not None:
        _remember_launch(program, record.run_id)
    for root in _roots_of(record):
        _remember_in_project(root, record.run_id)


def _roots_of(record: RunRecord) -> list[Path]:
    """The folders a run belongs to: where it was submitted from and its script's folder."""
    if not record.submit_dir:
        return []
    base = Path(record.submit_dir)
    roots = [base]
    if record.script and record.script not in ("python", "--wrap"):
        script = Path(record.script)
        roots.append((script if script.is_absolute() else base / script).parent)
    return list(dict.fromkeys(root.resolve() for root in roots))


def _remember_in_project(root: Path, run_id: str) -> None:
    def add(data: dict[str, Any]) -> None:
        runs = [r for r in _strings(data.get("runs")) if r != run_id] + [run_id]
        data.update(folder=str(root), runs=runs[-PROJECT_RUNS_KEPT:])

    update_json(_project_file(root), add)


def _project_file(root: Path) -> Path:
    return references_dir() / f"project-{hashlib.sha1(str(root).encode()).hexdigest()[:16]}.json"


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value if isinstance(value, (str, int, float, bool)) or value is None else str(value)


def finished_healthy(record: RunRecord) -> tuple[bool, str]:
    """Whether the run ended on its own with its sidecar content, and if not, why."""
    return _healthy(read_json(record.sidecar_state_file))


def _healthy(state: object) -> tuple[bool, str]:
    if not isinstance(state, dict):
        return False, "its sidecar never wrote a state (did it run?)"
    if not state.get("finished"):
        return False, "it has not finished (or its sidecar has not seen it end)"
    if state.get("last_decision") == "STOP":
        return False, f"its sidecar stopped it ({state.get('last_reason')})"
    if state.get("last_job_state") != "COMPLETED":
        return False, f"its job ended {state.get('last_job_state') or 'in an unknown state'}, not COMPLETED"
    if state.get("last_decision") != "CONTINUE":
        return False, (f"its last check was {state.get('last_decision') or 'never made'} {state.get('last_reason') or ''}"
                       "".rstrip() + ", not CONTINUE")
    return True, f"finished COMPLETED at step {state.get('last_step')}, last check CONTINUE"


def make_reference(record: RunRecord) -> Path:
    """`guarded-sbatch reference RUN`: make this finished run the reference of its config family (or, launched
    with no config file, of its program's launches)."""
    ok, why = finished_healthy(record)
    if not ok:
        raise UsageError(f"run {record.run_id} cannot be a reference: {why}")
    snapshot = record.folder / SNAPSHOT
    raw = read_json(snapshot)
    values = raw.get("values") if isinstance(raw, dict) else None
    program = family_of(RunConfig(None, values)) if isinstance(values, dict) else None
    if program is not None:
        target = _launch_family_file(program)
        update_json(target, lambda data: data.update(named=record.run_id, why=why))
        return target
    if not record.config_path or not snapshot.is_file():
        raise UsageError(f"run {record.run_id} has no recorded config (launched by an older guarded-sbatch); pass "
                         "--guard-reference FILE at launch instead")
    target = references_dir() / f"{family_key(record.config_path)}.json"
    write_json_atomic(target, {"run_id": record.run_id, "config_path": record.config_path, "why": why})
    return target


def _reference_of(record: RunRecord, how: str) -> Reference | None:
    raw = read_json(record.folder / SNAPSHOT)
    if not isinstance(raw, dict) or not isinstance(raw.get("values"), dict):
        return None
    config = RunConfig(record.folder / SNAPSHOT, dict(raw["values"]), (record.folder / SNAPSHOT,),
                       dict(raw.get("overrides") or {}))
    logs = tuple(Path(p) for p in (record.sources.get("stdout"), record.sources.get("stderr")) if p and Path(p).is_file())
    specs = record.sources.get("specs")
    tb_dirs = tuple(Path(spec["locator"]) for spec in (specs if isinstance(specs, list) else [])
                    if isinstance(spec, dict) and spec.get("kind") == "tensorboard"
                    and str(spec.get("locator", "")).startswith("/"))
    return Reference(config, record.folder, None, 0, logs=logs, tb_dirs=tb_dirs, how=f"{how}: run {record.run_id}")


def family_reference(config_path: Path | None) -> Reference | None:
    """The reference named with `guarded-sbatch reference RUN` for this config family, if any."""
    if config_path is None:
        return None
    raw = read_json(references_dir() / f"{family_key(config_path)}.json")
    if not isinstance(raw, dict):
        return None
    record = _record(raw.get("run_id"))
    return _reference_of(record, "named with `guarded-sbatch reference`") if record is not None else None


def healthy_reference(intended: RunConfig | None, roots: list[Path], max_age_days: float) -> Reference | None:
    """The reference chosen for the user: among their guarded runs submitted in the last `max_age_days` that
    finished healthy (COMPLETED, last check CONTINUE), launched from one of `roots` (submitted there, or their
    script there: the project's bounded list of its last runs, never the whole registry), the one whose config (as
    it was launched) is most like this run's (its own config first); the newest of equals. None: no such run yet."""
    if intended is None:
        return None
    since = time.time() - max_age_days * 86400
    own = family_key(intended.path) if intended.path is not None else None
    run_ids: list[str] = []
    for root in dict.fromkeys(root.resolve() for root in roots):
        raw = read_json(_project_file(root))
        run_ids += _strings(raw.get("runs")) if isinstance(raw, dict) else []
    # each run's health from its sidecar's state first: records are read only for runs that finished healthy, the
    # newest first, and the newest of this run's own config ends the search (a loop's 100th launch costs its 1st's)
    healthy = [run_id for run_id in reversed(list(dict.fromkeys(run_ids)))
               if _safe_id(run_id) and _healthy(read_json(runs_root() / run_id / SIDECAR_STATE))[0]]
    records = [record for run_id in healthy if (record := _record(run_id)) is not None]
    best: tuple[float, Reference] | None = None
    seen = 0
    for record in sorted(records, key=lambda r: -r.submitted_at):
        if not record.config_path or record.submitted_at < since:
            continue
        path = Path(record.config_path).resolve()
        same = own is not None and family_key(path) == own
        how = "the last run of this config that finished healthy" if same else "a run that finished healthy"
        found = _reference_of(record, how)
        if found is None:
            continue
        seen += 1
        score = 1.0 if same else similarity(intended, RunConfig(path, found.config.values))
        if score > 0 and (best is None or score > best[0]):
            best = (score, dataclasses.replace(found, score=score, how=f"{found.how}, config {path}"))
        if same:
            break
    return dataclasses.replace(best[1], candidates_seen=seen) if best is not None else None


def use_launcher_line(context: PreflightContext) -> bool:
    """A launch naming no config file: its launcher line becomes its config and its program's runs its
    references (True); else nothing changes (False)."""
    if not wants_launcher_config(context):
        return False
    intended = launcher_config(context, run_name_of(context)[0])
    context.intended, context.intended_problem = intended, None
    program = str(family_of(intended))
    context.reference = launcher_reference(program)
    if context.reference is None:
        context.reference_problem = f"no guarded run of {program} has finished healthy yet"
    return True


def launcher_reference(program: str) -> Reference | None:
    """The reference of a program's launches: the run named with `guarded-sbatch reference RUN`, else its last
    run that finished healthy (never a launch not known to have: a broken run is no reference)."""
    raw = read_json(_launch_family_file(program))
    if not isinstance(raw, dict):
        return None
    named = _record(raw.get("named"))
    if named is not None:
        return _reference_of(named, "named with `guarded-sbatch reference`")
    # each run's health from its sidecar's state alone: a record is read only for the run chosen (a loop's 100th
    # launch costs what its 1st does)
    run_ids = [run_id for run_id in reversed(_strings(raw.get("runs"))) if _safe_id(run_id)]
    for run_id in run_ids:
        if _healthy(read_json(runs_root() / run_id / SIDECAR_STATE))[0] and (record := _record(run_id)):
            return _reference_of(record, "the last run of this program that finished healthy")
    return None


def _remember_launch(program: str, run_id: str) -> None:
    _remember_run(_launch_family_file(program), run_id, program=program)


def _remember_run(family_file: Path, run_id: str, **also: str) -> None:
    def add(data: dict[str, Any]) -> None:
        runs = [r for r in _strings(data.get("runs")) if r != run_id] + [run_id]
        data.update(runs=runs[-FAMILY_RUNS_KEPT:], **also)

    update_json(family_file, add)


def _launch_family_file(program: str) -> Path:
    return references_dir() / f"launch-{hashlib.sha1(program.encode()).hexdigest()[:16]}.json"


def _safe_id(run_id: object) -> bool:
    return isinstance(run_id, str) and bool(run_id) and "/" not in run_id and run_id not in {".", ".."}


def _record(run_id: object) -> RunRecord | None:
    if not isinstance(run_id, str) or not _safe_id(run_id):
        return None
    raw = read_json(runs_root() / run_id / "run.json", own=True)
    try:
        return RunRecord.from_json(raw) if isinstance(raw, dict) else None
    except UsageError:
        return None


def _strings(value: object) -> list[str]:
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []
