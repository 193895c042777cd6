"""MLflow as a source kind: detected by MLFLOW_TRACKING_URI or mlflow in the program or config; a store
(`mlflow.db`, `mlruns/`) holds every job's runs, so a guarded run reads only the run tagged with its own tag (pinned
at launch: `_pin` adds it to the job's MLFLOW_RUN_CONTEXT), and a store found under a folder is taken only when a
person reads that folder by hand."""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from guarded_sbatch.core import door
from guarded_sbatch.sources.run_sources import SourceSpec
from guarded_sbatch.sources.kind_launch import LaunchKind, PinContext, PinnedRun, Uses, call_argument
from guarded_sbatch.sources.base import MetricSource
from guarded_sbatch.sources.kind_base import Finds, JobWriter, Picking, SourceKind



def _settings(values: Mapping[str, object], source: str, env: Mapping[str, str]) -> dict[str, str]:
    experiment = env.get("MLFLOW_EXPERIMENT_NAME") or call_argument(source, r"set_experiment\(\s*(?:experiment_name\s*=\s*)?")
    return {k: v for k, v in {"tracking_uri": env.get("MLFLOW_TRACKING_URI", ""), "experiment": experiment or ""}.items() if v}


def _review(settings: Mapping[str, str]) -> tuple[str, str]:
    if "experiment" not in settings:
        return "warned", "MLflow without an experiment name: set MLFLOW_EXPERIMENT_NAME"
    return "passed", "tracker mlflow found"


MLFLOW_TAG = "guarded_sbatch.run"


def _pin(job: PinContext) -> PinnedRun:
    """The job's MLflow run: the MLFLOW_RUN_ID it is given, else the run mlflow.start_run() creates with the tags
    of MLFLOW_RUN_CONTEXT, to which the launch adds its own tag (the user's tags kept)."""
    pinned = PinnedRun(run_id=job.env.get("MLFLOW_RUN_ID", ""), locator=job.env.get("MLFLOW_TRACKING_URI", ""),
                       origin="the job's MLflow run", search=job.folders[:1])
    tags: dict[str, str] = {}
    if existing := job.env.get("MLFLOW_RUN_CONTEXT", ""):
        try:
            parsed = json.loads(existing)
        except ValueError:
            return replace(pinned, unresolved="MLFLOW_RUN_CONTEXT is not JSON: the job's MLflow run cannot be tagged")
        if not isinstance(parsed, dict):
            return pinned
        tags = {str(k): str(v) for k, v in parsed.items()}
    tag = tags.get(MLFLOW_TAG) or secrets.token_hex(8)
    tags[MLFLOW_TAG] = tag
    return replace(pinned, tag=tag, export={"MLFLOW_RUN_CONTEXT": json.dumps(tags)},
                   note=f"the MLflow run tagged {MLFLOW_TAG}={tag}")


LAUNCH = LaunchKind("mlflow", env_signs=("MLFLOW_TRACKING_URI",), uses=(
    Uses("{where} uses mlflow", imports=("mlflow",), config_words=("mlflow",)),
), settings=_settings, review=_review, pin=_pin)


def mlflow_stores(uri: str, workdir: str) -> list[Path]:
    """Where the job's MLflow runs are: its MLFLOW_TRACKING_URI when local, else MLflow's defaults in its folder."""
    base = Path(workdir)
    if uri.startswith("sqlite:///"):
        rest = uri[len("sqlite:///"):]
        return [Path("/" + rest.lstrip("/")) if rest.startswith("/") else base / rest]
    uri = uri.removeprefix("file://")
    if uri and "://" not in uri:
        return [Path(uri) if Path(uri).is_absolute() else base / uri]
    if uri:
        return []  # a tracking server: read through its API, not here
    return [base / "mlflow.db", base / "mlruns"]


def mlflow_tagged_run(store: Path, key: str, value: str) -> str | None:
    """The id of the run in `store` carrying tag key=value (as MLFLOW_RUN_CONTEXT sets it), or None."""
    if store.is_file():
        import sqlite3  # noqa: PLC0415  lazy: a declaration loads its reader only when opened

        try:
            connection = sqlite3.connect(f"file:{store.resolve().as_posix()}?mode=ro", uri=True, timeout=5)
            try:
                row = connection.execute("SELECT run_uuid FROM tags WHERE key = ? AND value = ? LIMIT 1",
                                         (key, value)).fetchone()
            finally:
                connection.close()
        except sqlite3.Error:
            return None
        return str(row[0]) if row else None
    try:
        for tag in store.glob(f"*/*/tags/{key}"):
            if door.read(tag, 64 << 10, head=True).text("replace").strip() == value:
                return tag.parent.parent.name
    except OSError:
        return None
    return None


def _open(path: Path) -> MetricSource:
    from guarded_sbatch.sources.mlflow import MlflowSource  # noqa: PLC0415  lazy (see kind_base.py)

    return MlflowSource(path)


def _open_spec(spec: SourceSpec, job: JobWriter) -> list[MetricSource]:
    from guarded_sbatch.sources.mlflow import MlflowSource  # noqa: PLC0415  lazy (see kind_base.py)

    writer = spec.writer
    workdir = spec.search[0] if spec.search else ""
    if not (writer.tag or writer.run_id):
        return [MlflowSource(Path(spec.locator))] if spec.locator and Path(spec.locator).exists() else []
    for store in mlflow_stores(spec.locator, workdir):
        if store.exists():
            run_id = writer.run_id or mlflow_tagged_run(store, MLFLOW_TAG, writer.tag)
            if run_id:
                return [MlflowSource(store, run_id)]
    return []


def _pick(found: list[Path], picking: Picking) -> list[Path]:
    """By hand (no run start): every store. For a run: none (a store holds every job's runs; the record's tagged
    spec reads the run's own)."""
    if picking.since is None:
        return found
    picking.notes.extend(f"MLflow store {store}: no run tagged as this run's" for store in found)
    return []


KIND = SourceKind("mlflow", "--mlflow", "MLflow store (mlflow.db or mlruns/)", 2, "mlflow_ok", _open,
                  needs_existing_path=False, open_spec=_open_spec, launch=LAUNCH,
                  finds=Finds("MLflow", file=lambda name: name == "mlflow.db", folder=lambda name: name == "mlruns",
                              pick=_pick))
