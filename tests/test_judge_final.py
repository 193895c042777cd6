"""The last word when the training job ends: one last read of every source, and the final decision and report made
from it (the crash verdict when the job died by itself), before the sidecar exits; `status` shows that one. A guarded
launch passes its [judge] thresholds to its sidecar through the run's record.

Real local jobs (LocalScheduler) running the example trainer or a real Python script; the race the last read closes
(the job writes its last lines and ends between a poll's read and its question to the scheduler) is made
deterministic by a scheduler wrapper that lets the job finish inside that question."""

from __future__ import annotations

import io
import json
import sys
import time
from pathlib import Path

from e2e_helpers import make_project, submitted_job_id, wait_for
from guarded_sbatch.scheduler.delegating import DelegatingScheduler
from guarded_sbatch.scheduler.interface import JobState, SubmitRequest
from guarded_sbatch.scheduler.local import LocalScheduler
from guarded_sbatch.sidecar.loop import Sidecar
from guarded_sbatch.sources.run_sources import specs_from_flags
from guarded_sbatch.core.config import SidecarJobSettings
from guarded_sbatch.sidecar.plan import WatchPlan
from guarded_sbatch.sidecar.state import SidecarState

TB = "runs/synthetic-tanh-mlp-bs64-lr5e-2"


def test_a_completed_local_job_shows_its_final_decision_from_all_its_steps(tmp_path: Path) -> None:
    project = make_project(tmp_path, fast_interval=30.0)  # fewer polls than the run has seconds: the last read counts
    with open(tmp_path / "user-config.toml", "a", encoding="utf-8") as config:
        config.write("[judge]\nnonfinite_loss_points = 3\n")  # recorded with the run, used by its sidecar
    result = project.cli("--guard-backend", "local", "--guard-tb", TB, "train.sh", "--steps", "300",
                         "--step-seconds", "0.01")
    assert result.returncode == 0, result.stderr
    job_id = submitted_job_id(result.stdout)
    scheduler = LocalScheduler(project.state_dir / "local-jobs")
    record = project.run_record(job_id)
    assert record["judge"] == {"nonfinite_loss_points": 3}
    wait_for(lambda: scheduler.state(record["sidecar_id"]).is_terminal, 180, what="sidecar to exit")
    assert scheduler.info(job_id).state is JobState.COMPLETED
    status = project.cli_here("status", "--json", check=True)
    (row,) = [r for r in json.loads(status.stdout)["runs"] if r["job_id"] == job_id]
    assert row["last_step"] >= 290, row  # the final decision is judged on all 300 steps, not the first poll's
    assert (row["decision"], row["reason"]) == ("CONTINUE", "healthy"), row
    output = project.sidecar_output(job_id)
    assert "judging with the run's [judge] thresholds: nonfinite_loss_points = 3" in output
    assert f"ended COMPLETED; sidecar done (final decision CONTINUE healthy at step {row['last_step']})" in output


class _EndsWhileAsked(DelegatingScheduler):
    """The real local scheduler; the first time the sidecar asks about the job, the job writes its last lines
    and ends before the answer (what happens when a job ends between a poll's read and its job poll)."""

    def __init__(self, inner: LocalScheduler, finish: object) -> None:
        super().__init__(inner)
        self.finish, self.asked = finish, 0

    def state(self, job_id: str) -> JobState:
        self.asked += 1
        if self.asked == 2:
            self.finish()  # type: ignore[operator]
            wait_for(lambda: self.inner.state(job_id).is_terminal, 30, what="the job to end")
        return self.inner.state(job_id)


def _job(tmp_path: Path, body: str) -> tuple[LocalScheduler, str, Path, Path]:
    """A real local job running `body` (Python): it writes its log and waits for a go file before its tail."""
    log, go = tmp_path / "train.log", tmp_path / "go"
    script = tmp_path / "train.py"
    script.write_text(body.replace("GO", repr(str(go))), encoding="utf-8")
    job = tmp_path / "job.sh"
    job.write_text(f"#!/bin/bash\nexec {sys.executable} {script} > {log} 2>&1\n", encoding="utf-8")  # a trainer's stdout
    scheduler = LocalScheduler(tmp_path / "jobs")
    job_id = scheduler.submit(SubmitRequest(script=job, workdir=tmp_path))
    wait_for(lambda: log.is_file() and log.stat().st_size > 0, 30, what="the job's first log lines")
    return scheduler, job_id, log, go


TRAINER = """
import math, os, time
for step in range(1, 15):
    print(f"step {step} loss {3.0 / math.sqrt(step)} lr 1e-03", flush=True)
while not os.path.exists(GO):
    time.sleep(0.05)
for step in range(15, 301):
    print(f"step {step} loss {TAIL} lr 1e-03", flush=True)
END
"""


def _watch(tmp_path: Path, tail: str, end: str) -> tuple[str, SidecarState, JobState]:
    scheduler, job_id, log, go = _job(tmp_path, TRAINER.replace("TAIL", tail).replace("END", end))
    asked = _EndsWhileAsked(scheduler, lambda: go.touch())
    settings = WatchPlan(run_name="final-read-mlp-bs8-lr1e-3", job_id=job_id, state_file=tmp_path / "state.json",
                               evidence_dir=tmp_path / "evidence", sources=specs_from_flags({"textlog": [log]}),
                               sidecar=SidecarJobSettings(fast_interval_s=1.0), startup_grace_s=0.0)
    out = io.StringIO()
    clock = [time.time()]

    def sleep(seconds: float) -> None:
        clock[0] += seconds

    code = Sidecar(settings, asked, out, clock=lambda: clock[0], sleep=sleep).run()
    assert code == 0
    return out.getvalue(), SidecarState.load(settings.state_file), scheduler.state(job_id)


def test_the_last_read_after_the_job_ended_gives_the_final_decision(tmp_path: Path) -> None:
    output, state, job = _watch(tmp_path, "3.0 / math.sqrt(step)", "pass")
    assert job is JobState.COMPLETED
    assert (state.last_decision, state.last_reason, state.last_step) == ("CONTINUE", "healthy", 300), output
    assert state.finished and "- Decision: CONTINUE" in output.split("## Training Check")[-1]


def test_a_job_that_died_by_itself_gets_its_crash_verdict_and_nothing_is_stopped(tmp_path: Path) -> None:
    output, state, job = _watch(tmp_path, "3.0 / math.sqrt(step)",
                                "raise RuntimeError('CUDA error: an illegal memory access was encountered')")
    assert job is JobState.FAILED
    assert (state.last_decision, state.last_reason, state.last_step) == ("STOP", "crashed", 300), output
    assert "illegal memory access" in state.last_message
    assert not state.stop_requested_at and "had already ended FAILED; nothing to stop" in output
    assert "FINAL_SUMMARY" in output and (tmp_path / "evidence" / "evidence.json").is_file()


def test_a_real_hf_trainer_dying_behind_its_progress_bar(tmp_path: Path) -> None:
    """transformers' Trainer (tiny GPT-2, tqdm on stderr) as the job; its model raises torch.OutOfMemoryError at
    step 37, so the traceback starts on the bar's line. The sidecar, watching the job's output with a real clock,
    ends with the crash verdict named by the root error, and stops nothing."""
    maker = Path(__file__).parent / "data" / "trainer_logs" / "make_real_logs.py"
    log = tmp_path / "slurm-1.out"
    job = tmp_path / "job.sh"
    job.write_text(f"#!/bin/bash\ncd {tmp_path}\nexport TRANSFORMERS_VERBOSITY=warning\n"
                   f"exec {sys.executable} {maker} --child hf {tmp_path / 'record.json'} > {log} 2>&1\n")
    scheduler = LocalScheduler(tmp_path / "jobs")
    job_id = scheduler.submit(SubmitRequest(script=job, workdir=tmp_path))
    settings = WatchPlan(run_name="tiny-gpt2-hf-bs4-lr5e-3", job_id=job_id, state_file=tmp_path / "state.json",
                               evidence_dir=tmp_path / "evidence", sources=specs_from_flags({"textlog": [log]}),
                               sidecar=SidecarJobSettings(fast_interval_s=0.5), startup_poll_s=0.5)
    out = io.StringIO()
    assert Sidecar(settings, scheduler, out).run() == 0
    state = SidecarState.load(settings.state_file)
    assert scheduler.state(job_id) is JobState.FAILED
    assert (state.last_decision, state.last_reason) == ("STOP", "crashed"), out.getvalue()
    assert state.last_message.startswith("crashed: torch.OutOfMemoryError: CUDA out of memory"), state.last_message
    assert "Decision: CONTINUE" not in out.getvalue().split("## Training Check")[-1]
    assert not state.stop_requested_at and "nothing to stop" in out.getvalue()
