"""hydra-submitit-launcher's launchers, each multirun sent through guarded-sbatch: the sweep is one job array
(submitit's map_array, as the plain launcher submits it) launched by GuardedExecutor — one pre-flight for the
sweep, one watcher for the array, each job its own run in `guarded-sbatch status`. A job the guard stopped is a
FAILED job of the sweep whose error is GuardStoppedError (its reason); the others run on.

Imported by Hydra's plugin scan and in every job: the guard itself is imported only when a sweep is launched."""

from __future__ import annotations

import typing as tp
from collections.abc import Sequence

from hydra.core.utils import JobReturn
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import BaseSubmititLauncher, LocalLauncher, SlurmLauncher


class _Guarded(BaseSubmititLauncher):
    _BACKEND = "slurm"  # the guard's backend for this launcher's jobs

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from hydra_plugins.guarded_submitit_launcher._sweep import sweep_executors  # noqa: PLC0415 - the guard, not in every job

        assert self.config is not None
        guard = dict(self.params.pop("guard", None) or {})  # not a submitit parameter
        try:
            with sweep_executors(self._BACKEND, guard, self.config, job_overrides):
                return super().launch(job_overrides, initial_job_idx)
        finally:
            self.params["guard"] = guard


class GuardedSlurmLauncher(_Guarded, SlurmLauncher):
    _BACKEND = "slurm"


class GuardedLocalLauncher(_Guarded, LocalLauncher):
    _BACKEND = "local"


__all__: tp.Final = ["GuardedLocalLauncher", "GuardedSlurmLauncher"]
