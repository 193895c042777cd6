"""Adding a judge check is one module plus its line in the ordered check table (docs/architecture.md, "Where a new
piece goes"): on a copy of the package, `judge/checks_lr_ceiling.py` is written and `judge/ordered_checks.py` gains
its entry in CHECKS (with the module's import); nothing else differs (checked). The judge run from the copy then
decides with it — a STOP whose finding names its evidence (the metric, the step, the value) — while the same history
judged by the real package has no such finding, and a healthy history stays CONTINUE."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from package_copy import PACKAGE, changed_lines, differences, package_copy


CHECK_MODULE = '''"""A learning rate above a fixed ceiling is a broken schedule, whatever the loss does yet."""

from __future__ import annotations

from guarded_sbatch.judge.findings import Finding
from guarded_sbatch.judge.history import MetricHistory
from guarded_sbatch.judge.select import RunKeys
from guarded_sbatch.judge.verdict import Anomaly, Reason

LR_CEILING = 10.0


def check_lr_ceiling(history: MetricHistory, keys: RunKeys) -> Finding | None:
    if not keys.lr:
        return None
    steps, values = history.series(keys.lr)
    above = [(int(step), float(value)) for step, value in zip(steps, values) if value > LR_CEILING]
    if not above:
        return None
    step, value = above[0]
    return Finding.hard_stop(Reason.LR_SCHEDULE, f"learning rate {value:g} at step {step} is above the ceiling "
                             f"{LR_CEILING:g}", Anomaly("lr_ceiling", keys.lr, step, value, f"{keys.lr} = {value:g}"))
'''
IMPORT_LINE = "from guarded_sbatch.judge import checks_lr_ceiling\n"
TABLE_LINE = '    ("lr_ceiling", lambda c: checks_lr_ceiling.check_lr_ceiling(c.history, c.keys)),\n'

JUDGE = """
import json
from guarded_sbatch.judge import MetricHistory, decide
from guarded_sbatch.sources.points import MetricPoint

def judged(lr_spike):
    points = [MetricPoint(s, 0.0, "train/loss", 2.0 * 0.99 ** s + 0.1) for s in range(1, 301)]
    points += [MetricPoint(s, 0.0, "lr", 50.0 if lr_spike and s >= 150 else 0.01) for s in range(1, 301)]
    verdict = decide(MetricHistory.from_points(points))
    return {"decision": verdict.decision.value, "reason": verdict.reason.value, "message": verdict.message,
            "anomalies": [[a.kind, a.metric, a.step, a.value] for a in verdict.anomalies]}

print(json.dumps({"spike": judged(True), "healthy": judged(False)}))
"""


@pytest.fixture(scope="module")
def package_with_check(tmp_path_factory: pytest.TempPathFactory) -> Path:
    findings, entry = "from guarded_sbatch.judge.findings import Finding\n", '    ("lr_schedule", '
    return package_copy(tmp_path_factory.mktemp("package"), "judge/checks_lr_ceiling.py", CHECK_MODULE,
                        "judge/ordered_checks.py", [(findings, IMPORT_LINE + findings), (entry, TABLE_LINE + entry)])


def _judged(package: Path | None) -> dict[str, dict[str, object]]:
    env = {**os.environ, "PYTHONPATH": str(package)} if package else dict(os.environ)
    out = subprocess.run([sys.executable, "-c", JUDGE], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_the_new_check_is_one_module_and_its_line_in_the_ordered_table(package_with_check: Path) -> None:
    assert differences(PACKAGE, package_with_check / "guarded_sbatch") == (["judge/checks_lr_ceiling.py"],
                                                                            ["judge/ordered_checks.py"])
    assert changed_lines("judge/ordered_checks.py", package_with_check) == ["+" + IMPORT_LINE, "+" + TABLE_LINE]


def test_the_judge_decides_with_the_added_check_and_names_its_evidence(package_with_check: Path) -> None:
    added, real = _judged(package_with_check), _judged(None)
    spike = added["spike"]
    assert (spike["decision"], spike["reason"]) == ("STOP", "lr_schedule"), spike
    assert "learning rate 50 at step 150 is above the ceiling 10" in str(spike["message"]), spike
    assert ["lr_ceiling", "lr", 150, 50.0] in spike["anomalies"], spike  # the evidence: metric, step, value
    assert added["healthy"]["decision"] == "CONTINUE", added["healthy"]
    assert real["healthy"] == added["healthy"]  # the added check changes nothing on a healthy run
    assert all(anomaly[0] != "lr_ceiling" for anomaly in real["spike"]["anomalies"])  # the real judge has no such check
    assert "above the ceiling" not in str(real["spike"]["message"])
