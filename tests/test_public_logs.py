"""The guard on verbatim training logs pasted in public issue threads (tests/data/public_logs, issue 41).

Each <name>.log is the text a user pasted, kept as it was; MANIFEST-a/-b/-c.toml name each log's source,
its tool and the label its thread grounds ("stop" = broken, "continue" = healthy, "either"), written before the tool
ran on it. Each log is judged as a user first types it: `guarded-sbatch monitor --once --json --log FILE`, in-process
(tests/cli_runner.py), no flags.

Strict: the decision is the label ("either" takes any). Acceptable: a broken log STOP or WAIT, a healthy one not STOP.
No data: a log that prints per-step numbers (`per_step_numbers`) read as nothing (reason no_data, or too_early with no
loss judged).

The issue's targets are the tests named `test_target_...` (the first prints the table and the totals):
`.venv/bin/python -m pytest -q -p no:cacheprovider tests/test_public_logs.py -k target -s`.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cli_runner import run_cli

CORPUS = Path(__file__).resolve().parent / "data" / "public_logs"
MANIFESTS = ("MANIFEST-a.toml", "MANIFEST-b.toml", "MANIFEST-c.toml")
LABELS = {"stop", "continue", "either"}
EXIT = {"CONTINUE": 0, "WAIT": 10, "STOP": 11}


def _entries() -> list[dict[str, Any]]:
    """Every log of the manifests there are (a manifest is a list of tables under one name, `[[log]]`)."""
    found: list[dict[str, Any]] = []
    for name in MANIFESTS:
        path = CORPUS / name
        if not path.is_file():
            continue
        with open(path, "rb") as handle:
            table = tomllib.load(handle)
        for value in table.values():
            if isinstance(value, list):
                found += [{**entry, "manifest": name} for entry in value if isinstance(entry, dict)]
    return found


ENTRIES = _entries()
pytestmark = pytest.mark.skipif(not ENTRIES and os.environ.get("CI") != "true",
                                reason="tests/data/public_logs is not in this checkout yet")


def _log_path(entry: dict[str, Any]) -> Path:
    named = entry.get("file") or entry.get("log") or f"{entry['name']}.log"
    return CORPUS / str(named)


def _per_step(entry: dict[str, Any]) -> bool:
    return bool(entry.get("per_step_numbers", True))


@dataclass(frozen=True)
class Judged:
    entry: dict[str, Any]
    decision: str
    reason: str
    message: str
    loss_key: str

    @property
    def label(self) -> str:
        return str(self.entry["label"])

    @property
    def strict(self) -> bool:
        wanted = {"stop": "STOP", "continue": "CONTINUE"}.get(self.label)
        return wanted is None or self.decision == wanted

    @property
    def acceptable(self) -> bool:
        if self.label == "stop":
            return self.decision in {"STOP", "WAIT"}
        return self.label == "either" or self.decision != "STOP"

    @property
    def no_data(self) -> bool:
        """Read as nothing: no metric, or no loss judged and nothing else said."""
        no_loss = self.loss_key.startswith("no training-loss key") or not self.loss_key
        return self.reason == "no_data" or (self.reason == "too_early" and no_loss)


def judge_all(entries: list[dict[str, Any]], state: Path, where: Path) -> list[Judged]:
    env = {**os.environ, "GUARDED_SBATCH_STATE_DIR": str(state)}
    out = []
    for entry in entries:
        result = run_cli(["monitor", "--once", "--json", "--log", str(_log_path(entry))], env=env, cwd=where)
        payload = json.loads(result.stdout)
        assert result.returncode == EXIT[payload["decision"]], (entry["name"], result.stderr)
        loss_key = str((payload.get("summary") or {}).get("loss_key") or "")
        out.append(Judged(entry, payload["decision"], payload.get("reason", ""), payload.get("message", ""),
                          loss_key))
    return out


@pytest.fixture(scope="module")
def judged(tmp_path_factory: pytest.TempPathFactory) -> list[Judged]:
    return judge_all(ENTRIES, tmp_path_factory.mktemp("state"), tmp_path_factory.mktemp("cwd"))


def _tool(entry: dict[str, Any]) -> str:
    return str(entry.get("tool", "?")).split(" (")[0].strip().lower()


def table(rows: list[Judged]) -> str:
    lines = [f"{'name':40s} {'tool':18s} {'label':8s} {'decision':8s} {'ok':2s} {'reason':20s} message"]
    for row in rows:
        mark = "=" if row.strict else ("~" if row.acceptable else "X")
        lines.append(f"{str(row.entry['name'])[:40]:40s} {_tool(row.entry)[:18]:18s} {row.label:8s} "
                     f"{row.decision:8s} {mark:2s} {row.reason[:20]:20s} {row.message[:70]}")
    return "\n".join(lines)


def totals(rows: list[Judged]) -> dict[str, Any]:
    broken = [r for r in rows if r.label == "stop"]
    healthy = [r for r in rows if r.label == "continue"]
    per_step = [r for r in rows if _per_step(r.entry)]
    n = max(1, len(rows))
    return {
        "logs": len(rows), "broken": len(broken), "healthy": len(healthy),
        "either": sum(r.label == "either" for r in rows),
        "acceptable": sum(r.acceptable for r in rows), "acceptable_pct": round(100 * sum(r.acceptable for r in rows) / n, 1),
        "strict": sum(r.strict for r in rows), "strict_pct": round(100 * sum(r.strict for r in rows) / n, 1),
        "broken_stopped": sum(r.decision == "STOP" for r in broken),
        "broken_wait": sum(r.decision == "WAIT" for r in broken),
        "broken_continue": sum(r.decision == "CONTINUE" for r in broken),
        "healthy_continue": sum(r.decision == "CONTINUE" for r in healthy),
        "healthy_wait": sum(r.decision == "WAIT" for r in healthy),
        "false_stop": sum(r.decision == "STOP" for r in healthy),
        "per_step_logs": len(per_step), "no_data": sum(r.no_data for r in per_step),
    }


def test_the_manifests_name_every_log_once_with_its_label() -> None:
    names = [entry["name"] for entry in ENTRIES]
    assert len(set(names)) == len(names), [n for n, c in Counter(names).items() if c > 1]
    for entry in ENTRIES:
        assert entry["label"] in LABELS, entry["name"]
        assert _log_path(entry).is_file(), entry["name"]
    on_disk = sorted(p.name for p in CORPUS.glob("*.log"))
    assert sorted(_log_path(e).name for e in ENTRIES) == on_disk, "every .log is in a manifest, and only those"


def test_target_scores_table_every_log_judged(judged: list[Judged], capsys: pytest.CaptureFixture[str]) -> None:
    """The table of decisions and the totals (always printed; the targets are asserted below)."""
    found = totals(judged)
    with capsys.disabled():
        print("\n" + table(judged))
        print("totals: " + ", ".join(f"{key} {value}" for key, value in found.items()))
    assert found["logs"] == len(ENTRIES)


# The targets are acceptable 100 % and strict >= 85 %; what this corpus reaches now is held as a floor (a change
# may only raise it): 127 of 127 acceptable, 108 of 127 strict (85.0 %); part c alone, scored before any change it led
# to: 14 of 15 acceptable, 12 strict, 0 false STOP.
ACCEPTABLE_FLOOR = 127
STRICT_FLOOR = 108


def test_target_acceptable_never_falls(judged: list[Judged]) -> None:
    wrong = [r for r in judged if not r.acceptable]
    assert len(judged) - len(wrong) >= ACCEPTABLE_FLOOR, "not acceptable:\n" + table(wrong)


def test_target_never_a_stop_on_a_healthy_log(judged: list[Judged]) -> None:
    false_stops = [r for r in judged if r.label == "continue" and r.decision == "STOP"]
    assert not false_stops, "STOP on a healthy log:\n" + table(false_stops)


def test_target_strict_never_falls(judged: list[Judged]) -> None:
    away = [r for r in judged if not r.strict]
    assert len(judged) - len(away) >= STRICT_FLOOR, (
        f"{len(away)} of {len(judged)} away from the thread's call:\n" + table(away))


def test_target_no_data_on_at_most_5_percent_of_the_logs_with_per_step_numbers(judged: list[Judged]) -> None:
    per_step = [r for r in judged if _per_step(r.entry)]
    blind = [r for r in per_step if r.no_data]
    assert len(blind) <= 0.05 * len(per_step), f"{len(blind)} of {len(per_step)} read as nothing:\n" + table(blind)
