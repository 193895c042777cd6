"""What a pre-flight check returns. Light on purpose: the login node imports it."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from guarded_sbatch.core.check_names import CHECK_NAMES, CheckName

__all__ = ["CHECK_NAMES", "CheckName", "CheckResult", "CheckStatus", "worst_status"]


class CheckStatus(str, enum.Enum):
    PASSED = "passed"
    WARNED = "warned"
    FAILED = "failed"


@dataclass(frozen=True)
class CheckResult:
    name: str
    status: CheckStatus
    finding: str  # one line a person reads first
    evidence: tuple[str, ...] = ()  # what the finding rests on: values, files, commands
    details: dict[str, object] = field(default_factory=dict)  # machine-readable extras for --json

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "status": self.status.value,
            "finding": self.finding,
            "evidence": list(self.evidence),
            **({"details": self.details} if self.details else {}),
        }


def worst_status(statuses: list[CheckStatus]) -> CheckStatus:
    if CheckStatus.FAILED in statuses:
        return CheckStatus.FAILED
    if CheckStatus.WARNED in statuses:
        return CheckStatus.WARNED
    return CheckStatus.PASSED
