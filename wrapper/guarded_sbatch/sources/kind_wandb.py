"""W&B as a source kind: detected by WANDB_API_KEY, `import wandb`, a config reporting to wandb; a local run log
`run-<id>.wandb` under a folder (one run's), or a run path/URL read online; the run pinned at launch by the
WANDB_RUN_ID the job is given (`_pin`); the run's local folders deleted by `kill` (only those of the run id the job
was given, never another user's)."""

from __future__ import annotations

import re
import secrets
import string
from collections.abc import Mapping
from pathlib import Path

from guarded_sbatch.sources.kind_launch import LaunchKind, PinContext, PinnedRun, Uses, call_argument
from guarded_sbatch.sources.run_sources import SourceSpec
from guarded_sbatch.sources.base import MetricSource, SourceError
from guarded_sbatch.sources.kind_base import Finds, JobWriter, SourceKind, modified_at



def _settings(values: Mapping[str, object], source: str, environ: Mapping[str, str]) -> dict[str, str]:
    """The W&B run's project, entity, name, tags, group (the job's variables, else the config, else wandb.init)."""
    settings: dict[str, str] = {}
    for key, variable, config_keys in (
        ("project", "WANDB_PROJECT", ("wandb.project", "wandb_project", "logger.project")),
        ("entity", "WANDB_ENTITY", ("wandb.entity", "wandb_entity", "logger.entity")),
        ("name", "WANDB_NAME", ("wandb.name", "wandb_name", "run_name", "logger.name")),
        ("tags", "WANDB_TAGS", ("wandb.tags", "wandb_tags", "logger.tags")),
        ("group", "WANDB_RUN_GROUP", ("wandb.group", "wandb_group", "logger.group")),
    ):
        value = environ.get(variable, "")
        if not value:
            value = next((str(values[k]) for k in config_keys if values.get(k) not in (None, "")), "")
        if not value:
            value = call_argument(source, rf"wandb\.init\([^)]*?\b{key}\s*=\s*") or ""
        if not value and re.search(rf"wandb\.init\([^)]*?\b{key}\s*=", source, re.DOTALL):
            value = "(set in code)"
        if value:
            settings[key] = value
    if environ.get("WANDB_MODE"):
        settings["mode"] = environ["WANDB_MODE"]
    return settings


def _review(settings: Mapping[str, str]) -> tuple[str, str]:
    """Logging on, a project named (failed otherwise); an entity and a name (W&B picks one otherwise: warned)."""
    if settings.get("mode") == "disabled":
        return "failed", "WANDB_MODE=disabled: the run logs nothing; unset it or use offline"
    if "project" not in settings:
        return "failed", "W&B project not set: set WANDB_PROJECT or wandb.project in the config"
    missing = [key for key in ("entity", "name") if key not in settings]
    extras = f"; no {' or '.join(extra)}" if (extra := [k for k in ("tags", "group") if k not in settings]) else ""
    summary = f"W&B project {settings['project']}" + (f", entity {settings['entity']}" if "entity" in settings else "")
    if missing:
        return "warned", f"{summary}; not set: {', '.join(missing)} (W&B picks a default / random one){extras}"
    return "passed", f"{summary}, name {settings['name']}{extras}"


_ID_ALPHABET = string.ascii_lowercase + string.digits


def new_run_id() -> str:
    """Eight lowercase letters and digits, as wandb's own generate_id makes them."""
    return "".join(secrets.choice(_ID_ALPHABET) for _ in range(8))


def _pin(job: PinContext) -> PinnedRun:
    """The job's W&B run: the WANDB_RUN_ID it already has, else a new one exported (with WANDB_RESUME=allow, so a
    requeued job continues it); looked for under WANDB_DIR, the job's folder and the program's."""
    wandb_dir = job.env.get("WANDB_DIR", "")
    folders = tuple(dict.fromkeys([*([job.resolve(wandb_dir)] if wandb_dir else []), *job.folders]))
    given = job.env.get("WANDB_RUN_ID", "")
    if given:
        origin = "WANDB_RUN_ID set by the user"
        return PinnedRun(run_id=given, locator=given, origin=origin, search=folders, note=f"W&B run {given} ({origin})")
    if re.search(r"\bWANDB_RUN_ID=", job.script_text):
        return PinnedRun(unresolved="the script sets WANDB_RUN_ID with a shell expression: the W&B run is identified "
                                    "once its log appears")
    if job.array:  # one id exported to every task would make them all one W&B run
        return PinnedRun(unresolved="a job array: each task starts its own W&B run, identified once its log appears")
    run_id = new_run_id()
    export = {"WANDB_RUN_ID": run_id, **({} if job.env.get("WANDB_RESUME") else {"WANDB_RESUME": "allow"})}
    return PinnedRun(run_id=run_id, locator=run_id, origin="guarded-sbatch", export=export, search=folders,
                     note=f"W&B run {run_id} (exported as WANDB_RUN_ID)")


LAUNCH = LaunchKind("wandb", env_signs=("WANDB_API_KEY",), uses=(
    Uses("{where} imports wandb", imports=("wandb",), code=("WandbLogger",)),
    Uses("the config reports to wandb", config_words=("wandb",), config_prefixes=("wandb.", "wandb_")),
), settings=_settings, review=_review, pin=_pin)


def own_wandb_logs(folders: list[str], run_id: str) -> list[Path]:
    """Every local log of W&B run `run_id` (run-<date>-<id>/ or offline-run-<date>-<id>/; a requeue of an
    offline run makes a second folder), newest last."""
    logs: set[Path] = set()
    for folder in folders:
        base = Path(folder)
        for wandb_dir in (base / "wandb", base):
            try:
                logs.update(p for p in wandb_dir.glob(f"*run-*-{run_id}/run-{run_id}.wandb") if p.is_file())
            except OSError:
                continue
    return sorted(logs, key=modified_at)


def _open(spec: Path | str) -> MetricSource:
    from guarded_sbatch.sources.wandb_api import WandbApiSource  # noqa: PLC0415  lazy (see kind_base.py)
    from guarded_sbatch.sources.wandb_log import WandbLogSource, find_wandb_file  # noqa: PLC0415  lazy (see kind_base.py)

    text = str(spec)  # a URL must not pass through Path (it would fold "//")
    target = Path(text)
    if "://" in text or not target.exists():
        return WandbApiSource(text)  # a run URL or entity/project/id, read through the online API
    if find_wandb_file(target) is None:
        raise SourceError(f"no run-*.wandb log under {target}; give the run folder, wandb/ or the .wandb file")
    return WandbLogSource(target)


def _open_spec(spec: SourceSpec, job: JobWriter) -> list[MetricSource]:
    from guarded_sbatch.sources.wandb_api import WandbApiSource  # noqa: PLC0415  lazy (see kind_base.py)
    from guarded_sbatch.sources.wandb_log import WandbLogSource, find_wandb_file  # noqa: PLC0415  lazy (see kind_base.py)
    from guarded_sbatch.sources.writers import owned  # noqa: PLC0415  lazy (see kind_base.py)

    run_id = spec.writer.run_id
    if spec.search and run_id:  # known by the id the job was given: its newest log (a requeue makes a new folder)
        logs = [log for log in own_wandb_logs(list(spec.search), run_id) if owned(log, job().uid)]
        return [WandbLogSource(logs[-1], run_id=run_id)] if logs else []
    if "://" in spec.locator or not Path(spec.locator).exists():
        return [WandbApiSource(spec.locator)] if spec.locator and not spec.search else []
    if find_wandb_file(Path(spec.locator)) is None:
        return []
    return [WandbLogSource(Path(spec.locator), run_id=run_id)]


def _run_files(spec: SourceSpec) -> list[str]:
    """The local folders of the W&B run the job was given (never another run's, never another user's)."""
    from guarded_sbatch.sources.writers import owned  # noqa: PLC0415  lazy (see kind_base.py)

    if not (spec.search and spec.writer.run_id):
        return []
    return [str(log.parent) for log in own_wandb_logs(list(spec.search), spec.writer.run_id)
            if owned(log, spec.writer.uid)]


KIND = SourceKind("wandb", "--wandb", "W&B run folder, .wandb file, or run path/URL", 0, "wandb_ok", _open,
                  needs_existing_path=False, open_spec=_open_spec, run_files=_run_files, launch=LAUNCH,
                  finds=Finds("W&B", file=lambda name: name.endswith(".wandb") and name.startswith("run-")))
