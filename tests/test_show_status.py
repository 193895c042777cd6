"""`show RUN` on a live run and on a stopped one, piped and on a pseudo-terminal; `status` columns
(age, elapsed, exit code, stopped by) and filters (--project, --all), on real local-backend runs."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
from pathlib import Path

from e2e_helpers import Project, make_project, submitted_job_id, wait_for
from package_extras import read_audit
from guarded_sbatch.scheduler.local import LocalScheduler

TB = "runs/synthetic-tanh-mlp-bs64-lr5e-2"


def on_pty(project: Project, *args: str, timeout: float = 120) -> str:
    """Run the CLI with stdout on a pseudo-terminal; return what the terminal got."""
    master, slave = pty.openpty()
    env = {**project.env, "COLUMNS": "100", "LINES": "40", "TERM": "xterm-256color"}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen([sys.executable, "-m", "guarded_sbatch", *args], cwd=project.root, env=env,
                            stdout=slave, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    os.close(slave)
    chunks = []
    while True:
        ready, _, _ = select.select([master], [], [], timeout)
        if not ready:
            proc.kill()
            raise AssertionError("show on a pty did not finish")
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    assert proc.wait(timeout=30) == 0, proc.stderr.read()  # type: ignore[union-attr]
    os.close(master)
    return b"".join(chunks).decode("utf-8", errors="replace")


def _status_row(project: Project, job_id: str, *extra: str) -> dict | None:
    rows = json.loads(project.cli_here("status", "--json", *extra, check=True).stdout)["runs"]
    return next((r for r in rows if r["job_id"] == job_id), None)


def test_show_and_status_on_a_live_run_then_killed_by_its_owner(tmp_path: Path) -> None:
    project = make_project(tmp_path, fast_interval=1.0)
    audit = _with_audit(project, tmp_path)
    result = project.cli("--guard-backend", "local", "--guard-tb", TB, "train.sh", "--steps", "5000",
                         "--step-seconds", "0.05")
    assert result.returncode == 0, result.stderr
    assert "Clear: submitting now." in result.stderr and "```" not in result.stderr
    job_id = submitted_job_id(result.stdout)
    record = project.run_record(job_id)
    try:
        wait_for(lambda: "## Training Check" in project.sidecar_output(job_id), 90, what="a first report")
        piped = project.cli_here("show", job_id, check=True).stdout
        assert piped.startswith(f"# {record['run_name']} (job {job_id}): RUNNING")
        assert "## Training Check" in piped and "- Next check:" in piped and "Anomalies: none" in piped
        assert "train/loss (train_loss), last" in piped and "  step " in piped
        assert "\x1b[" not in piped and "FINAL_SUMMARY" not in piped

        screen = on_pty(project, "show", job_id)
        assert "\x1b[" in screen and "train/loss (training loss)" in screen
        assert any(0x2800 <= ord(ch) <= 0x28FF for ch in screen), "no braille plot on the terminal"

        png = tmp_path / "live.png"
        assert project.cli_here("show", job_id, "--png", str(png), check=True).returncode == 0
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

        row = _status_row(project, job_id)
        assert row and row["state"] == "RUNNING" and row["age"] and row["elapsed"] and row["exit_code"] is None
        assert row["stopped_by"] is None
        assert _status_row(project, job_id, "--project", str(project.root)) is not None
        assert _status_row(project, job_id, "--project", str(tmp_path / "elsewhere")) is None
        table = project.cli_here("status", check=True).stdout
        assert table.splitlines()[0].split()[:8] == ["RUN", "JOB", "STATE", "AGE", "ELAPSED", "EXIT", "STOPPED", "BY"]
    finally:
        killed = project.cli("kill", job_id, "--yes")
    assert killed.returncode == 0, killed.stderr
    row = _status_row(project, job_id)  # a killed run stays listed, with its end
    assert row and row["state"] == "CANCELLED" and row["stopped_by"] == "user (kill)" and row["exit"] == "0:15"
    assert [(r["event"], r["job"]) for r in read_audit(audit)] == [("launch", job_id), ("kill", job_id)]


def _with_audit(project: Project, tmp_path: Path) -> Path:
    log = tmp_path / "audit.jsonl"
    site = tmp_path / "site.toml"
    site.write_text(f'[audit]\nlog = "{log}"\n')
    project.env["GUARDED_SBATCH_SITE_CONFIG"] = str(site)
    return log


def test_show_and_status_on_a_run_stopped_by_the_guard(tmp_path: Path) -> None:
    project = make_project(tmp_path, evidence_plot=True)
    audit = _with_audit(project, tmp_path)
    result = project.cli("--guard-backend", "local", "--guard-tb", TB, "train.sh", "--steps", "3000",
                         "--nan-at", "60")
    assert result.returncode == 0, result.stderr
    job_id = submitted_job_id(result.stdout)
    record = project.run_record(job_id)
    scheduler = LocalScheduler(project.state_dir / "local-jobs")
    wait_for(lambda: scheduler.state(record["sidecar_id"]).is_terminal, 150, what="the sidecar to finish")
    row = _status_row(project, job_id)
    assert row and row["state"] == "CANCELLED" and row["stopped_by"] == "guard" and row["decision"] == "STOP"
    assert row["exit_code"] is not None and row["elapsed"]

    piped = project.cli_here("show", record["run_name"], check=True).stdout
    assert f"(job {job_id}): CANCELLED, stopped by guard" in piped
    assert "FINAL_SUMMARY" in piped and "- Decision: STOP" in piped
    assert "Anomalies: " in piped and "Anomalies: none" not in piped
    assert "evidence.json" in piped and "metrics.png" in piped and "\x1b[" not in piped
    assert "NaN" in piped or "Infinity" in piped  # the loss at the end, in the one spelling

    screen = on_pty(project, "show", job_id)
    assert "\x1b[" in screen and re.search(r"(NaN|Infinity) from step \d+", screen)

    shown = json.loads(project.cli_here("show", job_id, "--json", check=True).stdout)
    assert shown["stopped_by"] == "guard" and shown["series"]
    records = read_audit(audit)
    assert [r["event"] for r in records] == ["launch", "stop"] and {r["job"] for r in records} == {job_id}
    assert records[1]["check"] == row["reason"] and records[1]["evidence"].endswith("evidence.json")
    evidence = json.loads((project.state_dir / "runs" / record["run_id"] / "evidence" / "evidence.json").read_text())
    values = list(_leaves(evidence))
    other_spellings = [v for v in values if isinstance(v, str) and v != "NaN" and v.lower() in ("nan", "inf", "-inf")]
    assert not other_spellings and not [v for v in values if isinstance(v, str) and "float64" in v]
    assert "NaN" in values or "Infinity" in values


def _leaves(value):  # type: ignore[no-untyped-def]
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item) if key != "kind" else ()
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item)
    else:
        yield value
