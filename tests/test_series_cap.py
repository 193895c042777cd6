"""Bounded memory whatever a metric file holds: a cap on distinct series (loss-like ones kept first, the rest
counted and named in a WAIT), and a sidecar that survives a poll running out of memory (a real MemoryError under
an address-space limit) and says so with a sidecar_error alert instead of dying."""

from __future__ import annotations

import json
import math
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from alert_servers import HOST, WebhookServer
from watch_records import write_record
from e2e_helpers import REPO, wait_for
from guarded_sbatch.sources.points import MetricPoint
from guarded_sbatch.judge.history import MetricHistory
from guarded_sbatch.judge.source_state import judge
from guarded_sbatch.judge.verdict import Decision, Reason
from guarded_sbatch.scheduler.interface import JobState, SubmitRequest
from guarded_sbatch.scheduler.local import LocalScheduler

sys.path.insert(0, str(REPO / "bench"))
from bench_series_cap import write_run  # the bench's own writer of many-tag runs


def _healthy(key: str, steps: range) -> list[MetricPoint]:
    return [MetricPoint(step, 0.0, key, 2.0 / step + 0.1) for step in steps]


def test_at_the_cap_loss_like_series_are_kept_first_and_the_rest_counted() -> None:
    history = MetricHistory(max_series=10)
    history.add(_healthy("layers/0/activation_mean", range(1, 50)))
    history.add([MetricPoint(1, 0.0, f"samples/{i}/weight", 0.5) for i in range(200)])
    history.add(_healthy("train/loss", range(1, 300)))  # arrives late: takes the place of a per-sample series
    history.add(_healthy("eval/loss", range(50, 300, 50)))
    history.add(_healthy("learning_rate", range(1, 300)))
    assert {"train/loss", "eval/loss", "learning_rate"} <= set(history.keys())
    assert len(history.keys()) == 10
    assert history.dropped_series == 194  # 201 others offered, 10 kept at first, 3 of those gave way
    message = history.cap_message()
    assert "cap of 10 (GUARDED_SBATCH_MAX_SERIES)" in message and "194 of them not judged" in message
    verdict = judge(history, None, None)
    assert verdict.decision is Decision.WAIT and verdict.reason is Reason.SERIES_CAPPED
    assert "cap of 10" in verdict.message


def test_a_broken_run_is_still_stopped_past_the_cap() -> None:
    history = MetricHistory(max_series=5)
    history.add([MetricPoint(1, 0.0, f"per_sample/{i}", 0.5) for i in range(100)])
    history.add(_healthy("train/loss", range(1, 200)) + [MetricPoint(s, 0.0, "train/loss", math.nan) for s in range(200, 260)])
    assert judge(history, None, None).decision is Decision.STOP


def test_monitor_once_on_a_file_with_many_tags_names_the_cap(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write_run(run, 20_000)
    result = subprocess.run([sys.executable, "-P", "-m", "guarded_sbatch", "monitor", "--once", "--json", "--tb", str(run)],
                            capture_output=True, text=True, timeout=120, cwd="/",
                            env={**os.environ, "GUARDED_SBATCH_STATE_DIR": str(tmp_path / "state")})
    answer = json.loads(result.stdout)
    assert answer["decision"] == "WAIT" and answer["reason"] == "series_capped", answer
    assert "cap of 5000" in answer["message"] and "15001 of them not judged" in answer["message"]


def test_the_sidecar_survives_a_poll_that_runs_out_of_memory_and_alerts(tmp_path: Path) -> None:
    tb = tmp_path / "tb"
    hook = WebhookServer().start()
    config = tmp_path / "config.toml"
    config.write_text(f'[notify]\nurls = ["json://{HOST}:{hook.port}/hook"]\non = ["sidecar_error"]\n')
    env = {**os.environ, "GUARDED_SBATCH_STATE_DIR": str(tmp_path / "state"), "GUARDED_SBATCH_USER_CONFIG": str(config),
           "GUARDED_SBATCH_MAX_SERIES": "100000000", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    env.pop("GUARDED_SBATCH_SITE_CONFIG", None)
    scheduler = LocalScheduler(tmp_path / "state" / "local-jobs")
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\nsleep 30\n")
    job = scheduler.submit(SubmitRequest(script=script, sbatch_options=("--output", str(tmp_path / "job.out")),
                                         workdir=tmp_path, env={}))
    time.sleep(1.1)  # event files name their creation in whole seconds: one from before the job is not its own
    write_run(tb, 400_000)  # written while the job runs; with the cap lifted below, far more than the limit holds
    limit = 450 * 1024 * 1024

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    try:
        write_record(tmp_path / "run", job, "huge-run", backend="local", tb=tb,
                     sidecar={"fast_interval_s": 1.0, "job_poll_s": 2.0})
        sidecar = subprocess.run(
            [sys.executable, "-P", "-m", "guarded_sbatch", "sidecar", str(tmp_path / "run")],
            capture_output=True, text=True, timeout=240, cwd="/", env=env, preexec_fn=cap)
        assert sidecar.returncode == 0, sidecar.stdout[-2000:] + sidecar.stderr[-2000:]
        assert "MemoryError" in sidecar.stdout + sidecar.stderr
        assert "sidecar: alert (sidecar_error): sent to 1 of 1" in sidecar.stdout
        assert f"training job {job} ended COMPLETED" in sidecar.stdout  # watched to the end
        alerts = wait_for(lambda: hook.requests, 10, what="the alert")
        assert "ran out of memory" in json.dumps(alerts[0]["json"])
        assert scheduler.state(job) is JobState.COMPLETED
    finally:
        hook.stop()
        scheduler.cancel(job)
