"""What a pre-flight check returns. Light on purpose: the login node imports it."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from guarded_sbatch.core.check_names import CHECK_NAMES, CheckName

__all__ = ["API_WORDS", "CHECK_NAMES", "CLI_WORDS", "CheckName", "CheckResult", "CheckStatus", "render_fix",
           "worst_status"]

# How each front end names what a fix asks for ({check}: the check's name).
CLI_WORDS = {"config": "--guard-config FILE", "reference": "--guard-reference FILE",
             "waive": '--guard-waive {check}="REASON"'}
API_WORDS = {"config": 'config="FILE"', "reference": 'reference="FILE"', "waive": 'waivers={{"{check}": "REASON"}}'}


def render_fix(fix: str, check: str, words: Mapping[str, str]) -> str:
    """A fix template in a front end's words."""
    return fix.format(**{key: value.format(check=check) for key, value in words.items()})


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
    # the fix named in `finding`, as a template for any front end: {config} {reference} {waive} (CLI_WORDS, API_WORDS)
    fix: str = ""

    def finding_for(self, words: Mapping[str, str]) -> str:
        """The finding with its fix in a front end's words (`finding` holds it in the CLI's)."""
        if not self.fix:
            return self.finding
        return self.finding.replace(render_fix(self.fix, self.name, CLI_WORDS), render_fix(self.fix, self.name, words))

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
