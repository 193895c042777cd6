"""The trainer-log corpus (tests/data/trainer_logs): parsed triples, crashes, decisions, the real CLI,
and linear-time parsing of pathological lines."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

from package_extras import history_read
from guarded_sbatch.judge import Decision, decide
from guarded_sbatch.sources.points import CrashState
from guarded_sbatch.sources.textlog import TextLogSource
from guarded_sbatch.sources.textlog_crash import CrashTracker
from guarded_sbatch.sources.textlog_formats import parse_line
from textlog_corpus import CORPUS, corpus_logs, expected_of, read_all, read_history, read_with_crashes, score

LOGS = corpus_logs()
FORMATS = sorted({expected_of(log)["format"] for log in LOGS})


def test_the_corpus_covers_15_formats_with_nan_and_crash_endings() -> None:
    cases: dict[str, set[str]] = defaultdict(set)
    for log in LOGS:
        cases[expected_of(log)["format"]].add(expected_of(log)["case"])
    assert len(cases) >= 15, sorted(cases)
    for name, found in cases.items():
        assert {"healthy", "nan", "crash"} <= found, name
    assert sum("scale" in found for found in cases.values()) >= 6
    assert (CORPUS / "SOURCES.md").is_file()


def test_per_format_scores(capsys: pytest.CaptureFixture[str]) -> None:
    """>= 95 % of the printed (step, key, value) triples are parsed right, for every format."""
    per_format: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for log in LOGS:
        result = score(log)
        totals = per_format[expected_of(log)["format"]]
        totals[0] += result.matched
        totals[1] += result.expected
        totals[2] += result.parsed
    lines = [f"{'format':16s} {'right':>7s} {'of':>6s} {'recall':>7s} {'precision':>9s}"]
    for name, (matched, expected, parsed) in sorted(per_format.items()):
        lines.append(f"{name:16s} {matched:7d} {expected:6d} {matched / expected:7.1%} {matched / parsed:9.1%}")
    with capsys.disabled():
        print("\n" + "\n".join(lines))
    for name, (matched, expected, _) in per_format.items():
        assert matched / expected >= 0.95, name


@pytest.mark.parametrize("log", LOGS, ids=[log.stem for log in LOGS])
def test_crash_and_decision(log: Path) -> None:
    expected = expected_of(log)
    result = score(log)
    assert result.recall >= 0.95, result.wrong[:5]
    if expected["crash"] is None:
        assert result.crash_found is None
    else:
        assert result.crash_found and expected["crash"].lower() in result.crash_found.lower()
    verdict = decide(read_history(log))
    assert (verdict.decision is Decision.STOP) == (expected["decision"] == "STOP"), verdict.message
    if expected["case"] == "crash":
        kind = "interrupted" if expected["decision"] == "WAIT" else "crashed"  # Ctrl-C: may be resumed, never STOP
        assert verdict.decision is not Decision.CONTINUE, verdict.message
        assert verdict.reason.value == kind and verdict.message.startswith(f"{kind}: ")
        assert verdict.anomalies[0].kind == kind and verdict.anomalies[0].message  # the evidence line


def test_traceback_lines_are_never_metrics() -> None:
    for log in LOGS:
        keys = {p.key for p in read_all(log)}
        assert not keys & {"line", "File", "pid", "exitcode", "Tried to allocate"}, (log.stem, keys)


def _monitor(log: Path, state: Path) -> dict:
    result = subprocess.run(
        [sys.executable, "-m", "guarded_sbatch", "monitor", "--once", "--json", "--log", str(log),
         "--state-dir", str(state)], capture_output=True, text=True, timeout=120)
    payload = json.loads(result.stdout)
    assert result.returncode == {"CONTINUE": 0, "WAIT": 10, "STOP": 11}[payload["decision"]], result.stderr
    return payload


@pytest.mark.parametrize("name", FORMATS)
def test_nan_in_the_loss_stops_through_the_cli(name: str, tmp_path: Path) -> None:
    payload = _monitor(CORPUS / f"{name}_nan.log", tmp_path)
    assert payload["decision"] == "STOP", payload
    assert payload["data_source"]


def test_a_crash_stops_through_the_cli_with_its_evidence(tmp_path: Path) -> None:
    payload = _monitor(CORPUS / "megatron_crash.log", tmp_path)
    assert payload["decision"] == "STOP" and payload["reason"] == "crashed"
    assert "Watchdog caught collective operation timeout" in payload["anomalies"][0]["message"]
    assert all(" || " not in k for k in payload["summary"]["keys"].values() if k)  # a crash is no metric key


def test_a_requeued_run_that_trains_again_is_not_crashed(tmp_path: Path) -> None:
    log = tmp_path / "slurm-7.out"
    text = (CORPUS / "nanogpt_crash.log").read_text()
    resumed = "".join(f"iter {i}: loss {3.5 - i / 10000:.4f}, time 1100.00ms, mfu 15.00%\n" for i in range(400, 700, 10))
    log.write_text(text + resumed)
    _, crashes = read_with_crashes(log)
    assert crashes and crashes[-1].state is CrashState.DISMISSED
    assert decide(read_history(log)).reason.value != "crashed"


# torchrun's ending when the launcher template's checkpoint signal arrives before the time limit (a real job's
# output on the dev Slurm), then Slurm's own lines as the batch step is ended for the requeue
TORCHRUN_USR1_TAIL = """guarded-sbatch: USR1 at 02:09:56 UTC: time limit near, asking the trainer to checkpoint
Traceback (most recent call last):
  File "/venv/bin/torchrun", line 8, in <module>
    sys.exit(main())
  File "/venv/lib/python3.11/site-packages/torch/distributed/elastic/multiprocessing/api.py", line 86, in _terminate_proc
    raise SignalException(f"Process {os.getpid()} got signal: {sigval}", sigval=sigval)
torch.distributed.elastic.multiprocessing.api.SignalException: Process 14840 got signal: 10
srun: got SIGCONT
srun: Job step aborted: Waiting up to 32 seconds for job step to finish.
slurmstepd-node07: error: *** JOB 8256 ON node07 CANCELLED AT 2026-12-03T02:09:56 ***
srun: forcing job termination
slurmstepd-node07: error: *** STEP 8256.0 ON node07 CANCELLED AT 2026-12-03T02:09:56 ***
srun: error: node07: task 0: Terminated
srun: launch/slurm: _step_signal: Terminating StepId=8256.0
"""


def _healthy_dicts(first: int, last: int) -> str:
    return "".join(f"{{'loss': {0.5 / (1 + s / 100):.5f}, 'learning_rate': 0.05, 'step': {s}}}\n"
                   for s in range(first, last + 1, 10))


def test_the_checkpoint_signal_before_the_time_limit_is_not_a_crash(tmp_path: Path) -> None:
    """A healthy torchrun job told to checkpoint before its limit (it will be requeued) is never STOPped, and
    Slurm's own lines (`slurmstepd-<node>`, `srun: error: ... task 0`, `StepId=8256.0`) are never metrics."""
    log = tmp_path / "slurm-8256.out"
    log.write_text(_healthy_dicts(10, 350) + TORCHRUN_USR1_TAIL)
    points = read_all(log)
    assert {p.key for p in points} == {"loss", "learning_rate"}
    assert max(p.step for p in points) == 350
    verdict = decide(read_history(log))
    assert verdict.decision is Decision.WAIT and verdict.reason.value == "interrupted", verdict.message
    assert "SignalException" in verdict.message and verdict.last_step == 350
    payload = _monitor(log, tmp_path / "state")
    assert payload["decision"] == "WAIT" and payload["reason"] == "interrupted"
    with open(log, "a") as handle:  # the requeued run resumes from its checkpoint: judged as before
        handle.write(_healthy_dicts(360, 700))
    resumed = decide(read_history(log))
    assert resumed.decision is Decision.CONTINUE, resumed.message


@pytest.mark.parametrize(("ending", "decision", "reason"), [
    ("slurmstepd: error: *** JOB 5 ON n1 CANCELLED AT 2026-01-01T00:00:00 DUE TO TIME LIMIT ***", "WAIT", "interrupted"),
    ("slurmstepd-n1: error: *** JOB 5 ON n1 CANCELLED AT 2026-01-01T00:00:00 DUE TO PREEMPTION ***", "WAIT",
     "interrupted"),
    ("slurmstepd-n1: error: Detected 1 oom-kill event(s) in StepId=5.batch. Some of your processes may have been "
     "killed by the cgroup out-of-memory handler.", "STOP", "crashed"),
    ("KeyboardInterrupt", "WAIT", "interrupted"),
    ("RuntimeError: CUDA error: an illegal memory access was encountered", "STOP", "crashed"),
])
def test_an_interruption_waits_and_a_failure_stops(tmp_path: Path, ending: str, decision: str, reason: str) -> None:
    log = tmp_path / "out.log"
    body = "Traceback (most recent call last):\n  File \"train.py\", line 9, in <module>\n" if "Error" in ending or \
        ending == "KeyboardInterrupt" else ""
    log.write_text(_healthy_dicts(10, 200) + body + ending + "\n")
    verdict = decide(read_history(log))
    assert (verdict.decision.value, verdict.reason.value) == (decision, reason), verdict.message


def test_a_nan_before_an_interruption_still_stops(tmp_path: Path) -> None:
    log = tmp_path / "out.log"
    nan = "".join(f"{{'loss': nan, 'learning_rate': 0.05, 'step': {s}}}\n" for s in range(210, 260, 10))
    log.write_text(_healthy_dicts(10, 200) + nan + "Traceback (most recent call last):\nKeyboardInterrupt\n")
    verdict = decide(read_history(log))
    assert verdict.decision is Decision.STOP and verdict.reason.value == "non_finite_loss", verdict.message


def test_crash_found_when_it_arrives_in_a_later_read(tmp_path: Path) -> None:
    log = tmp_path / "out.log"
    lines = (CORPUS / "litgpt_crash.log").read_text().splitlines(keepends=True)
    log.write_text("".join(lines[:-3]))
    source = TextLogSource(log)
    history = history_read(source)
    cut = decide(history)  # the log ends inside the traceback so far: a crash that cannot say why yet
    assert cut.reason.value == "crashed" and "before its exception line" in cut.message, cut.message
    with open(log, "a") as handle:
        handle.write("".join(lines[-3:]))
    history.read_from(source)
    verdict = decide(history)
    assert verdict.reason.value == "crashed" and "OutOfMemoryError" in verdict.message, verdict.message


@pytest.mark.parametrize(("line", "step", "values"), [
    ("step 130 loss nan lr 1e-03", 130, {"loss": math.nan, "lr": 1e-3}),
    ("step 131 loss NaN lr 1e-03", 131, {"loss": math.nan, "lr": 1e-3}),
    ("step 132 loss inf grad_norm -inf lr 1e-03", 132, {"loss": math.inf, "grad_norm": -math.inf}),
    ('{"step": 5, "loss": Infinity, "val_loss": -Infinity}', 5, {"loss": math.inf, "val_loss": -math.inf}),
    ("iter 120 step 30: loss 1.70, iter time: 12.5ms", 120, {"loss": 1.7}),
    ("| epoch 027 | loss 6.343 | nll_loss 4.984 | ppl 31.65 | num_updates 10198 | lr 0.000626286", 10198,
     {"loss": 6.343, "lr": 0.000626286}),
    ("2020-05-15 14:41:49,633 - mmdet - INFO - Epoch [2][250/2500]\tlr: 1.250e-03, loss: 1.8553", 2750,
     {"lr": 1.25e-3, "loss": 1.8553}),
    ("2024-01-01 10:00:00 - mmseg - INFO - Iter [1200/40000]\tlr: 9.730e-03, loss: 0.6531", 1200, {"loss": 0.6531}),
    ("[default3]: iteration      122/  250000 | lm loss: NAN | number of nan iterations:  10 |", 122,
     {"lm loss": math.nan, "number of nan iterations": 10.0}),
])
def test_tokens_anywhere_on_a_line(line: str, step: int, values: dict[str, float]) -> None:
    parsed = parse_line(line)
    assert parsed is not None and parsed.step == step, parsed
    for key, value in values.items():
        got = parsed.values[key]
        assert (math.isnan(got) and math.isnan(value)) or got == pytest.approx(value), (key, got)


def test_loss_scale_drop_recorded_with_its_new_value_at_its_step(tmp_path: Path) -> None:
    log = tmp_path / "hf.log"
    log.write_text("\r 14%|█▍        | 378/2724 [13:58:09<86:18:35, 132.44s/it][2023-06-07 22:16:00,018] [INFO] "
                   "[loss_scaler.py:181:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss "
                   "scale: 64, reducing to 32\n")
    points = TextLogSource(log).read_new()
    (point,) = [p for p in points if p.key == "loss_scale"]
    assert (point.step, point.key, point.value) == (379, "loss_scale", 32.0)
    assert [(p.step, p.key, p.value) for p in points if p.key != "loss_scale"] == [(379, "overflow", 1.0)]  # a skip


PATHOLOGICAL = {
    "spaces": " " * 1_000_000,
    "a=": "a=" * 500_000,
    "a: ": "a: " * 333_333,
    "digits": "1" * 1_000_000,
    "commas": "1," * 500_000,
    "braces": "{'a" * 333_333,
    "pipes": "|" * 1_000_000,
    "bar": "%|" * 500_000,
    "ranks": "[rank0]:" * 125_000,
    "quotes": "'a': " * 200_000,
    "nan": "loss nan " * 111_111,
    "File": 'File "x", line 1 ' * 55_555,
}


@pytest.mark.parametrize("name", sorted(PATHOLOGICAL))
def test_a_megabyte_line_parses_in_linear_time(name: str, tmp_path: Path) -> None:
    log = tmp_path / "big.log"
    log.write_text(PATHOLOGICAL[name] + "\n")
    best = math.inf
    for _ in range(3):
        source = TextLogSource(log)
        start = time.perf_counter()
        source.read_new()
        best = min(best, time.perf_counter() - start)
    assert best <= 0.050, f"{name}: {best * 1000:.1f} ms"


@pytest.mark.parametrize("name", sorted(PATHOLOGICAL))
def test_the_tokenizer_itself_is_linear_on_a_megabyte(name: str) -> None:
    """Below the reader's record cap too: no regex backtracks over the line (quadratic would take minutes)."""
    line = PATHOLOGICAL[name]
    best = math.inf
    for _ in range(3):
        start = time.perf_counter()
        parse_line(line)
        CrashTracker().feed(line, None)
        best = min(best, time.perf_counter() - start)
    assert best <= 0.300, f"{name}: {best * 1000:.1f} ms"
