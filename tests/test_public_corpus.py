"""The judge on real training runs posted in public issue threads (tests/data/public_runs, MANIFEST.toml).

Each run's facts (<name>.json: the numbers it logged, its events, its log's layout) are rendered in its tool's own
format by tests/public_runs_render.py into a temporary <name>.log, and the log is judged as a user first types it:
`guarded-sbatch monitor --once --json --log FILE`, run in-process (tests/cli_runner.py). A run's label comes from its
thread: "stop" (broken), "continue" (healthy), "either".
Strict: the decision is the label ("either" takes any). Lenient (acceptable): a broken run held at WAIT is
acceptable but counted apart; a healthy run may be CONTINUE or WAIT, never STOP.

The issue's targets (issue 37) are the tests named `test_target_...` (the first prints the table and the totals);
run them alone with `.venv/bin/python -m pytest -q tests/test_public_corpus.py -k target -s`.
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

import public_runs_render
from cli_runner import run_cli

CORPUS = Path(__file__).resolve().parent / "data" / "public_runs"
MANIFEST = CORPUS / "MANIFEST.toml"
LABELS = {"stop", "continue", "either"}
EXIT = {"CONTINUE": 0, "WAIT": 10, "STOP": 11}
FIELDS = {"name", "tool", "repository", "issue", "url", "summary", "label"}


@dataclass(frozen=True)
class Judged:
    entry: dict
    decision: str
    reason: str
    message: str

    @property
    def strict(self) -> bool:
        wanted = {"stop": "STOP", "continue": "CONTINUE"}.get(self.entry["label"])
        return wanted is None or self.decision == wanted

    @property
    def acceptable(self) -> bool:
        label = self.entry["label"]
        if label == "stop":
            return self.decision in {"STOP", "WAIT"}
        return label == "either" or self.decision != "STOP"


def _entries() -> list[dict]:
    with open(MANIFEST, "rb") as handle:
        return list(tomllib.load(handle)["run"])


ENTRIES = _entries()


def _log_name(entry: dict) -> str:
    return f"{entry['name']}.log"


def _render(entry: dict, folder: Path) -> Path:
    """The run's log as its tool prints it, written where the judge reads it."""
    path = folder / _log_name(entry)
    path.write_text(public_runs_render.render(public_runs_render.load(CORPUS / f"{entry['name']}.json")),
                    encoding="utf-8")
    return path


def _tool_family(tool: str) -> str:
    """The tool a log counts for: 'deepspeed (HF Trainer)' -> 'deepspeed'."""
    return tool.split(" (")[0].strip().lower()


@pytest.fixture(scope="module")
def judged(tmp_path_factory: pytest.TempPathFactory) -> list[Judged]:
    state = tmp_path_factory.mktemp("state")
    where = tmp_path_factory.mktemp("cwd")
    logs = tmp_path_factory.mktemp("public_runs")
    env = {**os.environ, "GUARDED_SBATCH_STATE_DIR": str(state)}
    out = []
    for entry in ENTRIES:
        result = run_cli(["monitor", "--once", "--json", "--log", str(_render(entry, logs))], env=env, cwd=where)
        payload = json.loads(result.stdout)
        assert result.returncode == EXIT[payload["decision"]], (entry["name"], result.stderr)
        out.append(Judged(entry, payload["decision"], payload.get("reason", ""), payload.get("message", "")))
    return out


def _table(rows: list[Judged]) -> str:
    lines = [f"{'file':44s} {'tool':22s} {'label':8s} {'decision':8s} {'ok':4s} reason"]
    for row in rows:
        mark = "=" if row.strict else ("~" if row.acceptable else "X")
        lines.append(f"{_log_name(row.entry)[:44]:44s} {_tool_family(row.entry['tool'])[:22]:22s} {row.entry['label']:8s} "
                     f"{row.decision:8s} {mark:4s} {row.message[:60]}")
    return "\n".join(lines)


def _totals(rows: list[Judged]) -> dict[str, int]:
    broken = [r for r in rows if r.entry["label"] == "stop"]
    healthy = [r for r in rows if r.entry["label"] == "continue"]
    return {
        "logs": len(rows), "broken": len(broken), "healthy": len(healthy),
        "either": sum(r.entry["label"] == "either" for r in rows),
        "strict": sum(r.strict for r in rows), "acceptable": sum(r.acceptable for r in rows),
        "broken_stopped": sum(r.decision == "STOP" for r in broken),
        "broken_wait": sum(r.decision == "WAIT" for r in broken),
        "broken_continue": sum(r.decision == "CONTINUE" for r in broken),
        "healthy_continue": sum(r.decision == "CONTINUE" for r in healthy),
        "healthy_wait": sum(r.decision == "WAIT" for r in healthy),
        "false_stop": sum(r.decision == "STOP" for r in healthy),
    }


def test_the_manifest_names_every_log_with_its_source(tmp_path: Path) -> None:
    runs = sorted(p.stem for p in CORPUS.glob("*.json"))
    listed = [entry["name"] for entry in ENTRIES]
    assert sorted(listed) == runs, "every run's .json is in MANIFEST.toml once, and every entry has its file"
    assert len(set(listed)) == len(listed)
    for entry in ENTRIES:
        assert FIELDS <= set(entry), (entry["name"], FIELDS - set(entry))
        assert entry["label"] in LABELS, entry["name"]
        assert re.fullmatch(rf"https://github\.com/{re.escape(entry['repository'])}/(issues|pull)/{entry['issue']}",
                            entry["url"]), entry["name"]
        assert entry["summary"].strip(), entry["name"]
        if entry["label"] == "stop":
            assert entry.get("stop_by"), f"{entry['name']}: a broken run says where an expert would stop"
        assert re.fullmatch(r"[a-z0-9]+_[a-z0-9_]+", entry["name"]), "<tool>_<shortname>"
        run = public_runs_render.load(CORPUS / f"{entry['name']}.json")
        assert run["run"] == entry["name"] and run["records"], entry["name"]
        assert _render(entry, tmp_path).read_text(encoding="utf-8").strip(), entry["name"]


def test_target_scores_table_every_log_judged(judged: list[Judged], capsys: pytest.CaptureFixture[str]) -> None:
    """The table of decisions and the totals (always printed; the targets are asserted below)."""
    totals = _totals(judged)
    with capsys.disabled():
        print("\n" + _table(judged))
        print("totals: " + ", ".join(f"{key} {value}" for key, value in totals.items()))
    assert totals["logs"] == len(ENTRIES)
    assert {r.decision for r in judged} <= set(EXIT)


def test_target_the_corpus_is_60_real_logs_from_10_tools_healthy_and_broken() -> None:
    tools = Counter(_tool_family(entry["tool"]) for entry in ENTRIES)
    labels = Counter(entry["label"] for entry in ENTRIES)
    assert len(ENTRIES) >= 60, f"{len(ENTRIES)} logs"
    assert len(tools) >= 10, sorted(tools)
    assert labels["stop"] >= 15 and labels["continue"] >= 15, dict(labels)


def test_target_every_log_is_acceptable(judged: list[Judged]) -> None:
    wrong = [r for r in judged if not r.acceptable]
    assert not wrong, "not acceptable:\n" + _table(wrong)


def test_target_never_a_stop_on_a_healthy_log(judged: list[Judged]) -> None:
    false_stops = [r for r in judged if r.entry["label"] == "continue" and r.decision == "STOP"]
    assert not false_stops, "STOP on a healthy log:\n" + _table(false_stops)


def test_target_at_most_10_percent_away_from_the_threads_call(judged: list[Judged]) -> None:
    away = [r for r in judged if not r.strict]
    assert len(away) <= 0.10 * len(judged), f"{len(away)} of {len(judged)} away from the thread's call:\n" + _table(away)
