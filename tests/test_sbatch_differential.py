"""Differential test: guarded-sbatch's sbatch parser against the real sbatch 22.05 on the dev Slurm.

Every case in tests/data/sbatch_cases.py is submitted held (`sbatch -v --hold --parsable ...`), what Slurm
stored is read back in one `scontrol -o show job` call, and all jobs go in one `scancel` at the end. The same
input goes through guarded-sbatch's parser (split_sbatch_argv, parse_script / parse_wrap, effective_options).

"Parsed" for sbatch: it exited 0, or it printed its `-v` list of defined options (printed only after its own
option checks passed) or the error came back from slurmctld ("Batch job submission failed": a resource this
one-node cluster lacks). Fields compared when both parsed: the time limit (Slurm's stored TimeLimit, else its
parsed `time`), nodes, tasks per node, the GPU options, job name, output/error paths, partition, constraint,
array, clusters. Set GUARDED_DIFF_TABLE=path to write the whole table as JSON.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from guarded_sbatch.core.errors import UsageError

pytestmark = pytest.mark.slurm

_spec = importlib.util.spec_from_file_location("sbatch_cases", Path(__file__).parent / "data" / "sbatch_cases.py")
assert _spec and _spec.loader
cases_module = importlib.util.module_from_spec(_spec)
sys.modules["sbatch_cases"] = cases_module
_spec.loader.exec_module(cases_module)
CASES = cases_module.CASES
Case = cases_module.Case

RAW_FIELDS = ("gpus", "gpus-per-node", "gpus-per-task", "gres", "job-name", "output", "error", "partition",
              "constraint", "array", "clusters")
_OPTION_LINE = re.compile(r"^sbatch: (\S+)\s*: (.*)$")


@dataclass
class SbatchResult:
    rc: int
    stdout: str
    stderr: str
    parsed: bool
    job_id: str | None
    folder: str = ""
    options: dict[str, str] = field(default_factory=dict)  # sbatch's -v "defined options"
    stored: dict[str, str] = field(default_factory=dict)  # scontrol -o show job

    @property
    def message(self) -> str:
        lines = [line for line in self.stderr.splitlines() if "error" in line.lower() or "invalid" in line.lower()]
        return (lines or self.stderr.strip().splitlines()[-1:] or [""])[0][:200]


def _clean_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SBATCH_", "SLURM_", "POSIXLY"))}
    env.update(extra)
    return env


def _script_path(case: Case, folder: Path) -> Path:
    path = folder / (re.sub(r"[^A-Za-z0-9_.-]", "_", case.id) + ".sh")
    path.write_bytes(case.script_text().encode("utf-8"))
    return path


def _argv(case: Case, script: Path) -> list[str]:
    return [*case.args] if case.no_script else [*case.args, str(script)]


def _run_sbatch(case: Case, folder: Path) -> SbatchResult:
    script = _script_path(case, folder)
    words = ["sbatch", *(["-v"] if case.verbose else []), "--hold", "--parsable", *_argv(case, script)]
    try:
        done = subprocess.run(words, cwd=folder, env=_clean_env(case.env), capture_output=True, timeout=30)
    except subprocess.TimeoutExpired:
        return SbatchResult(-1, "", "timed out", False, None)
    stdout = done.stdout.decode("utf-8", "replace")
    stderr = done.stderr.decode("utf-8", "replace")
    options: dict[str, str] = {}
    in_block = False
    for line in stderr.splitlines():
        if line.endswith("defined options"):
            in_block = not line.endswith("end of defined options")
            continue
        match = _OPTION_LINE.match(line)
        if in_block and match and not match.group(1).startswith("-"):
            options[match.group(1)] = match.group(2)
    parsed = done.returncode == 0 or "end of defined options" in stderr or "Batch job submission failed" in stderr
    job = next((m.group(1) for m in re.finditer(r"^(\d+)(?:;\S+)?$", stdout, re.M)), None)
    return SbatchResult(done.returncode, stdout, stderr, parsed, job, str(folder), options)


def _read_stored(results: dict[str, SbatchResult], folder: Path) -> list[str]:
    """Fill in what Slurm stored; return every job submitted from `folder` (with -Q sbatch prints no id)."""
    from guarded_sbatch.scheduler.slurm_parse import parse_key_values

    done = subprocess.run(["scontrol", "-o", "show", "job"], capture_output=True, text=True, timeout=60)
    by_id = {}
    ours = []
    for line in done.stdout.splitlines():
        fields = parse_key_values(line)
        by_id[fields.get("JobId", "")] = fields
        if fields.get("WorkDir") == str(folder):
            ours.append(fields.get("JobId", ""))
    for result in results.values():
        if result.job_id:
            result.stored = by_id.get(result.job_id, {})
    return [job for job in ours if job]


@pytest.fixture(scope="module")
def sbatch_results(slurm_cluster: None, tmp_path_factory: pytest.TempPathFactory) -> dict[str, SbatchResult]:
    folder = tmp_path_factory.mktemp("sbatchdiff")
    results: dict[str, SbatchResult] = {}
    ours: list[str] = []
    try:
        for case in CASES:
            results[case.id] = _run_sbatch(case, folder)
        ours = _read_stored(results, folder)
    finally:
        ids = sorted({*(r.job_id for r in results.values() if r.job_id), *ours})
        if ids:
            subprocess.run(["scancel", *ids], capture_output=True, timeout=60)
    return results


# --- guarded-sbatch's reading ------------------------------------------------------------------------------


def _guarded(case: Case, folder: Path) -> tuple[bool, str, dict[str, object]]:
    from guarded_sbatch.sbatch.argv import split_sbatch_argv
    from guarded_sbatch.sbatch.options import effective_options
    from guarded_sbatch.sbatch.script import parse_script, parse_wrap

    script_path = _script_path(case, folder)
    env = _clean_env(case.env)
    try:
        launch = split_sbatch_argv(_argv(case, script_path))
        if launch.info_only:
            return True, "", {}
        script = parse_script(launch.script, env) if launch.script is not None else parse_wrap(launch.wrap or "", env)
        where = str(launch.script or "--wrap")
        directives = [(f"{where} line {d.line_number}", o) for d in script.directives for o in d.options]
        options = effective_options(launch.parsed_options, directives, env)
        default_name = "wrap" if launch.script is None else launch.script.name
        fields: dict[str, object] = {
            "time_s": options.time_limit_s,
            "nodes": options.nodes,
            "tasks_per_node": options.tasks_per_node,
            "gpus_per_node": options.gpus_per_node,
            "name": options.job_name if options.job_name is not None else default_name,
            **{name: options.get(name) for name in RAW_FIELDS},
        }
    except UsageError as exc:
        return False, str(exc), {}
    except Exception as exc:  # a crash is a disagreement, reported in the row  # noqa: BLE001
        return False, f"CRASH {type(exc).__name__}: {exc}"[:300], {}
    return True, "", fields


# --- sbatch's reading, in the same shape -------------------------------------------------------------------


def _printed_time(text: str) -> int | None:
    """A time as Slurm prints it (mins2time_str / scontrol): [D-]HH:MM:SS or UNLIMITED."""
    if text in ("UNLIMITED", "Partition_Limit", "NONE", ""):
        return None
    days, _, clock = text.rpartition("-")
    h, m, s = (int(x) for x in clock.split(":"))
    return ((int(days or 0) * 24 + h) * 60 + m) * 60 + s


def _first_int(text: str | None, default: int) -> int:
    match = re.match(r"^(\d+)", text or "")
    return int(match.group(1)) if match else default


def _sbatch_fields(result: SbatchResult, case: Case, script_name: str) -> dict[str, object]:
    opts = dict(result.options)
    if "cluster" in opts:
        opts.setdefault("clusters", opts.pop("cluster"))
    stored = result.stored
    if stored.get("TimeLimit"):
        time_s = _printed_time(stored["TimeLimit"])
    else:
        time_s = _printed_time(opts["time"]) if "time" in opts else None
    # the node count a job asked for; without one, how many nodes Slurm would place its tasks on depends on the
    # cluster's node sizes (2 CPUs each on the multi-node dev Slurm), not on what sbatch parsed
    nodes = _first_int(stored.get("NumNodes") or opts.get("nodes"), 1) if "nodes" in opts else 1
    nodes = max(1, nodes)
    per_node = _first_int(opts.get("ntasks-per-node"), 0) if "ntasks-per-node" in opts else 0
    if per_node <= 0 and "ntasks" in opts:
        per_node = max(1, _first_int(opts["ntasks"], 1) // nodes)
    name = stored.get("JobName") if stored else opts.get("job-name")
    if name is None:
        name = "wrap" if any(a.startswith("--wr") for a in case.args) else script_name
    raw = {key: opts.get(key) for key in RAW_FIELDS}
    for key in ("output", "error"):
        value = raw[key]
        if value is not None and value.lower() == "none":
            raw[key] = "/dev/null"
        elif value is not None and value.startswith(result.folder + "/"):  # sbatch makes it absolute; we keep it
            raw[key] = value[len(result.folder) + 1 :]
    if raw["gres"]:
        raw["gres"] = ",".join(item.removeprefix("gres:") for item in raw["gres"].split(","))
    return {"time_s": time_s, "nodes": nodes, "tasks_per_node": per_node or 1, "name": name, **raw}


def _normalise_guarded(fields: dict[str, object]) -> dict[str, object]:
    out = dict(fields)
    out.pop("gpus_per_node", None)
    for key in ("output", "error"):
        value = out.get(key)
        if isinstance(value, str) and value.lower() == "none":
            out[key] = "/dev/null"
    return out


def compare(case: Case, result: SbatchResult, folder: Path) -> dict[str, object]:
    ok, why, fields = _guarded(case, folder)
    row: dict[str, object] = {"id": case.id, "sbatch_parsed": result.parsed, "guarded_parsed": ok,
                              "sbatch_rc": result.rc, "sbatch_message": result.message if result.rc else "",
                              "guarded_message": why, "diffs": {}}
    if ok and result.parsed and fields and result.options is not None and not any(
        a in ("--help", "-h", "--usage", "--version", "-V") for a in case.args
    ):
        script_name = _script_path(case, folder).name
        expected = _sbatch_fields(result, case, script_name)
        got = _normalise_guarded(fields)
        if case.verbose and not case.het:
            row["diffs"] = {k: {"sbatch": expected[k], "guarded": got.get(k)} for k in expected if expected[k] != got.get(k)}
        else:  # no -v, or -v shows a later het component: only what Slurm stored
            row["diffs"] = {k: {"sbatch": expected[k], "guarded": got.get(k)} for k in ("time_s", "name")
                            if result.stored and expected[k] != got.get(k)}
    verdict_agrees = ok == result.parsed and not why.startswith("CRASH")
    row["agree"] = verdict_agrees and not row["diffs"]
    row["intended"] = case.intended
    if case.intended:
        row["intended_ok"] = ok == case.intended_verdict
    return row


@pytest.fixture(scope="module")
def table(sbatch_results: dict[str, SbatchResult], tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, object]]:
    folder = tmp_path_factory.mktemp("guarded")
    rows = [compare(case, sbatch_results[case.id], folder) for case in CASES]
    out = os.environ.get("GUARDED_DIFF_TABLE")
    if out:
        Path(out).write_text(json.dumps(rows, indent=1, default=str))
    return rows


def test_battery_is_big_enough() -> None:
    assert len(CASES) >= 200
    assert len({case.id for case in CASES}) == len(CASES), "case ids must be unique"


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_guarded_reads_like_sbatch(case: Case, table: list[dict[str, object]]) -> None:
    row = next(r for r in table if r["id"] == case.id)
    if case.intended:
        assert row["intended_ok"], f"intended difference changed: {row}"
        assert not row["sbatch_parsed"] == row["guarded_parsed"] or row["diffs"], f"no longer differs: {row}"
        return
    assert row["agree"], json.dumps(row, indent=1, default=str)


def test_agreement_summary(table: list[dict[str, object]]) -> None:
    plain = [r for r in table if not r["intended"]]
    agreeing = sum(1 for r in plain if r["agree"])
    print(f"\nsbatch differential: {len(table)} cases, {agreeing}/{len(plain)} agree, "
          f"{len(table) - len(plain)} intended differences")
    assert agreeing == len(plain)
