"""Neptune as a source kind: detected at launch only (NEPTUNE_API_TOKEN, `import neptune`); no reader reads it,
so the pre-flight names it and the sidecar reads the run's other sources."""

from __future__ import annotations

from collections.abc import Mapping

from guarded_sbatch.sources.kind_launch import LaunchKind, Uses
from guarded_sbatch.sources.kind_base import SourceKind



def _settings(values: Mapping[str, object], source: str, env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in {"project": env.get("NEPTUNE_PROJECT", "")}.items() if v}


LAUNCH = LaunchKind("neptune", env_signs=("NEPTUNE_API_TOKEN",), uses=(Uses("{where} imports neptune", imports=("neptune",)),),
                    settings=_settings)

KIND = SourceKind("neptune", None, "Neptune (detected at launch, not read)", 9, "unreachable", None, launch=LAUNCH)
