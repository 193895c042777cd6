"""The guard's side of a Hydra sweep (imported only when a guarded launcher launches one; Hydra's plugin scan skips
modules whose name starts with `_`)."""

from __future__ import annotations

import re
import typing as tp
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import submitit
from hydra.core.utils import JobReturn, JobStatus, filter_overrides
from omegaconf import DictConfig, OmegaConf

from guarded_sbatch.launch.executor import GuardedExecutor, GuardStoppedError


def sweep_name(task_name: str, job_overrides: Sequence[Sequence[str]]) -> str:
    """<task name>-<the keys whose values differ between the jobs>-sweep, as the run-name rule wants it
    (lowercase letters, digits and dots in hyphen-joined parts): `train-lr-sweep`, `train-model.lr-seed-sweep`."""
    values: dict[str, set[str]] = {}
    for overrides in job_overrides:
        for override in filter_overrides(overrides):
            key, _, value = override.partition("=")
            values.setdefault(key.lstrip("+~"), set()).add(value)
    swept = [key for key, seen in values.items() if len(seen) > 1] or list(values)
    parts = [task_name, *swept, "sweep"]
    slugs = (re.sub(r"[^a-z0-9.]+", "-", part.lower()).strip("-.") for part in parts)
    return "-".join(slug for slug in slugs if slug)


def _composed_config(config: DictConfig) -> Path:
    """The sweep's composed config (without Hydra's own node) as a file the pre-flight can read and diff."""
    folder = Path(str(config.hydra.sweep.dir)) / ".guard"
    folder.mkdir(parents=True, exist_ok=True)
    plain = OmegaConf.to_container(config, resolve=False)
    assert isinstance(plain, dict)
    plain.pop("hydra", None)
    path = folder / "config.yaml"
    path.write_text(OmegaConf.to_yaml(OmegaConf.create(plain)), encoding="utf-8")
    return path


class _SweepJob:
    """submitit's job of one sweep job, as Hydra reads it: a guard STOP is that job's failure, not the sweep's end
    before the other jobs' results."""

    def __init__(self, job: tp.Any, overrides: Sequence[str]) -> None:
        self.job = job
        self.overrides = list(overrides)

    def results(self) -> list[JobReturn]:
        try:
            return tp.cast(list[JobReturn], self.job.results())
        except GuardStoppedError as exc:
            return [JobReturn(overrides=self.overrides, status=JobStatus.FAILED, _return_value=exc)]

    def __getattr__(self, name: str) -> tp.Any:
        return getattr(self.job, name)


class SweepExecutor(GuardedExecutor):
    def map_array(self, fn: tp.Callable[..., tp.Any], *iterables: tp.Iterable[tp.Any]) -> list[tp.Any]:
        arguments = [list(iterable) for iterable in iterables]
        jobs = super().map_array(fn, *arguments)
        return [_SweepJob(job, overrides) for job, overrides in zip(jobs, arguments[0])]


@contextmanager
def sweep_executors(backend: str, guard: dict[str, tp.Any], config: DictConfig,
                    job_overrides: Sequence[Sequence[str]]) -> Iterator[None]:
    """While hydra-submitit-launcher's own launch runs, the executor it makes is a GuardedExecutor on `backend`
    with the guard's keywords (its launch names submitit.AutoExecutor; nothing else of it is changed)."""
    keywords = {key: value for key, value in guard.items() if value not in (None, {}, "")}
    keywords.setdefault("run_name", sweep_name(str(config.hydra.job.name), job_overrides))
    if "config" not in keywords:
        keywords["config"] = str(_composed_config(config))

    def make(folder: str | Path, cluster: str | None = None, **kwargs: tp.Any) -> SweepExecutor:
        return SweepExecutor(folder, cluster=backend, **keywords, **kwargs)

    original = submitit.AutoExecutor
    submitit.AutoExecutor = make  # type: ignore[misc,assignment]
    try:
        yield
    finally:
        submitit.AutoExecutor = original  # type: ignore[misc]
