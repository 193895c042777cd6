"""Neptune as a source kind: detected at launch only (NEPTUNE_API_TOKEN, `import neptune`); no reader reads it,
so the pre-flight names it and the sidecar reads the run's other sources."""

from __future__ import annotations

from guarded_sbatch.core.source_kinds import LaunchKind, Uses
from guarded_sbatch.sources.kind_base import SourceKind

LAUNCH = LaunchKind("neptune", env_signs=("NEPTUNE_API_TOKEN",), uses=(Uses("{where} imports neptune", imports=("neptune",)),))

KIND = SourceKind("neptune", None, "Neptune (detected at launch, not read)", 9, "unreachable", None, launch=LAUNCH)
