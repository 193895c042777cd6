"""Every wait of the CLI and the executor says so (issue 36): a line within 2 s, progress once it lasts longer than
5 s. Each wait runs in-process against a slow scheduler (or a slow read) injected as a fault, with the times of
core/waiting.py shrunk (first line 0.1 s, progress from 0.5 s), so a wait of about a second stands for a long one:
`--wait`, the executor's `result()`, a kill's cancel of a whole array, a pre-flight and check-sweep on a scheduler
slow to answer, a launch on one slow to take the job, `status` and `show` on a slow controller, `monitor --once` on a
slow read, `stop` of a stubborn process, the install between pip's lines; and a background start says where its
output goes and how to follow it."""

from __future__ import annotations

import shutil
import time
import typing as tp
from pathlib import Path

import pytest

from guarded_sbatch.core.config import SidecarJobSettings
from e2e_helpers import EXAMPLE

from guarded_sbatch.cli import array_lifecycle
from guarded_sbatch.cli.launch import wait_for_job
from guarded_sbatch.core import waiting
from guarded_sbatch.core.config import Config
from guarded_sbatch.sbatch.argv import split_sbatch_argv
from guarded_sbatch.launch.executor import _Guarded
from guarded_sbatch.launch.pipeline import check_launch, follow_line
from guarded_sbatch.scheduler.delegating import DelegatingScheduler
from guarded_sbatch.scheduler.interface import BackendTraits, JobInfo, JobState, SchedulerDefaults, SubmitRequest
from guarded_sbatch.scheduler.local import LocalScheduler

SLOW_S = 1.2  # how long each slow thing takes here: past the shrunk first line (0.1 s) and first progress (0.5 s)


@pytest.fixture(autouse=True)
def quick_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(waiting, "FIRST_S", 0.1)
    monkeypatch.setattr(waiting, "PROGRESS_S", 0.5)
    monkeypatch.setattr(waiting, "MAX_GAP_S", 0.5)


class SlowJobs(SchedulerDefaults):
    """A scheduler whose jobs run for SLOW_S after they are asked about (or cancelled) first."""

    name = "local"  # polled every second at most by --wait
    traits = BackendTraits(wait_poll_s=0.1)

    def __init__(self) -> None:
        self.ends_at: float | None = None

    def _running(self) -> bool:
        if self.ends_at is None:
            self.ends_at = time.monotonic() + SLOW_S
        return time.monotonic() < self.ends_at

    def state(self, job_id: str) -> JobState:
        return JobState.RUNNING if self._running() else JobState.COMPLETED

    def info(self, job_id: str) -> JobInfo:
        return JobInfo(job_id=job_id, state=self.state(job_id), exit_code=0)

    def cancel(self, job_id: str, *, signal_name: str | None = None) -> None:
        self.ends_at = time.monotonic() + SLOW_S

    def submit(self, request: SubmitRequest) -> str:
        raise AssertionError("nothing is submitted here")


def _said(text: str) -> list[str]:
    return [line for line in text.splitlines() if "waiting for" in line]


def test_wait_says_it_waits_then_shows_the_jobs_state_as_it_goes(capsys: pytest.CaptureFixture[str]) -> None:
    assert wait_for_job(tp.cast(tp.Any, SlowJobs()), "5", quiet=False) == 0
    lines = _said(capsys.readouterr().err)
    assert lines[0].startswith("guarded-sbatch: waiting for job 5 to end (--wait)")
    assert any(line.startswith("guarded-sbatch: still waiting for job 5 to end (--wait) (") and ": RUNNING" in line
               for line in lines[1:]), lines


def test_quiet_wait_stays_quiet(capsys: pytest.CaptureFixture[str]) -> None:
    assert wait_for_job(tp.cast(tp.Any, SlowJobs()), "5", quiet=True) == 0
    assert capsys.readouterr().err == ""


def test_the_executors_result_says_it_waits_within_2_s_and_shows_progress(capsys: pytest.CaptureFixture[str]) -> None:
    class Job(_Guarded):
        job_id = "12"
        ends_at = time.monotonic() + SLOW_S

        def done(self) -> bool:
            return time.monotonic() >= self.ends_at

    Job().wait()
    lines = _said(capsys.readouterr().err)
    assert lines[0] == ("guarded-sbatch: waiting for job 12 to end; its guard watches it (`guarded-sbatch show 12`: "
                        "its verdict so far)")
    assert any(line.startswith("guarded-sbatch: still waiting for job 12 to end") for line in lines[1:]), lines


def test_kill_of_an_array_tells_the_wait_for_its_tasks(capsys: pytest.CaptureFixture[str]) -> None:
    class SlowArray(SlowJobs):
        def states(self, job_ids: list[str]) -> dict[str, JobState]:
            if self.ends_at is None:  # before the cancel: running
                return dict.fromkeys(job_ids, JobState.RUNNING)
            ended = time.monotonic() >= self.ends_at
            return dict.fromkeys(job_ids, JobState.CANCELLED if ended else JobState.RUNNING)

    before, after = array_lifecycle.cancel_array(tp.cast(tp.Any, SlowArray()), "9", ["9_0", "9_1"], poll_s=0.1)
    assert set(after.values()) == {JobState.CANCELLED}
    lines = _said(capsys.readouterr().err)
    assert lines[0] == "guarded-sbatch: waiting for the 2 tasks of array 9 to end after the cancel (at most 90 s)"
    assert any(line.endswith(": 2 still live") for line in lines[1:]), lines


def test_a_preflight_on_a_slow_scheduler_says_what_it_waits_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    class SlowToAnswer(DelegatingScheduler):
        def user_jobs(self) -> list[JobInfo]:
            time.sleep(SLOW_S)  # slurmctld busy: squeue takes its time
            return super().user_jobs()

    project = tmp_path / "project"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("events.out.tfevents.*", "__pycache__"))
    monkeypatch.setenv("GUARDED_SBATCH_STATE_DIR", str(tmp_path / "state"))
    scheduler = SlowToAnswer(LocalScheduler())
    report = check_launch(split_sbatch_argv(["train.sh"]), Config(), scheduler, cwd=project)
    assert report.results
    lines = _said(capsys.readouterr().err)
    assert lines[0].startswith("guarded-sbatch: waiting for the pre-flight of train.sh (it asks the scheduler")
    assert any(line.startswith("guarded-sbatch: still waiting for the pre-flight of train.sh") for line in lines[1:])


def test_check_sweep_counts_the_combinations_checked_on_a_slow_scheduler(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from guarded_sbatch.launch.sweep import check_sweep

    class SlowToAnswer(DelegatingScheduler):
        def user_jobs(self) -> list[JobInfo]:
            time.sleep(SLOW_S / 2)
            return super().user_jobs()

    project = tmp_path / "project"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("events.out.tfevents.*", "__pycache__"))
    monkeypatch.setenv("GUARDED_SBATCH_STATE_DIR", str(tmp_path / "state"))
    (project / "sweep.yaml").write_text(
        'program: train.py\nmethod: grid\ncommand: ["${interpreter}", "${program}", "--config", '
        '"configs/synthetic-tanh-mlp.yaml", "${args}"]\nparameters:\n  lr: {values: [0.025, 0.05]}\n')
    report = check_sweep(project / "sweep.yaml", ["--guard-run-name", "mlp-tanh-lr{lr}"], Config(),
                         SlowToAnswer(LocalScheduler()), cwd=project)
    assert len(report.combinations) == 2
    lines = _said(capsys.readouterr().err)
    assert lines[0] == "guarded-sbatch: waiting for the pre-flight of 2 combination(s)"
    assert any(line.endswith(": 1 of 2 checked") for line in lines[1:]), lines


def test_a_quick_preflight_says_nothing_of_waiting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(waiting, "FIRST_S", 1.5)  # the real first line's time
    project = tmp_path / "project"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("events.out.tfevents.*", "__pycache__"))
    monkeypatch.setenv("GUARDED_SBATCH_STATE_DIR", str(tmp_path / "state"))
    check_launch(split_sbatch_argv(["train.sh"]), Config(), LocalScheduler(), cwd=project)
    assert _said(capsys.readouterr().err) == []


def test_monitor_once_says_it_reads_a_slow_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    from guarded_sbatch.cli.main import main
    from guarded_sbatch.sidecar import one_shot
    from guarded_sbatch.sidecar.plan import WatchPlan

    real = one_shot.judge_once

    def slow(settings: WatchPlan, only_files: frozenset[str] | None = None) -> tp.Any:
        time.sleep(SLOW_S)  # a large run on a slow file system
        return real(settings, only_files)

    log = tmp_path / "train.log"
    log.write_text("".join(f"step {step} loss {1 / step:.4f}\n" for step in range(1, 40)))
    monkeypatch.setattr(one_shot, "judge_once", slow)
    main(["monitor", "--once", "--log", str(log)])
    lines = _said(capsys.readouterr().err)
    assert lines[0] == f"guarded-sbatch: waiting for the metrics of {log} to be read and judged"
    assert any(line.startswith("guarded-sbatch: still waiting for the metrics") for line in lines[1:]), lines


def test_a_background_start_says_where_its_output_goes_and_how_to_follow_it() -> None:
    line = follow_line("/home/u/proj/slurm-12.out", "mlp-lr3e-4-12")
    assert "its output goes to /home/u/proj/slurm-12.out (follow it: `tail -f /home/u/proj/slurm-12.out`)" in line
    assert "`guarded-sbatch status` lists it" in line and "`guarded-sbatch show mlp-lr3e-4-12`" in line
    node_pattern = follow_line("/home/u/proj/out-%N.log", "r-1")  # the node is known once it runs: no tail line
    assert "tail" not in node_pattern and "`guarded-sbatch show r-1`" in node_pattern
    assert "status --collapse" in follow_line("/x/slurm-3_0.out", "3", array=True)


def test_stop_of_a_stubborn_process_shows_progress_while_it_escalates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    import subprocess
    import sys

    from guarded_sbatch.cli.main import main

    monkeypatch.setenv("GUARDED_SBATCH_STATE_DIR", str(tmp_path / "state"))
    stubborn = subprocess.Popen([sys.executable, "-c", "import signal, time\n"
                                 "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                                 "signal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ready', flush=True)\n"
                                 "time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert stubborn.stdout is not None and stubborn.stdout.readline() == "ready\n"
        assert main(["stop", f"pid:{stubborn.pid}", "--grace", "0.5"]) == 0
    finally:
        stubborn.kill()
        stubborn.wait()
    err = capsys.readouterr().err
    assert err.startswith(f"stopping pid:{stubborn.pid}: interrupt, then terminate, then kill")
    assert f"guarded-sbatch: still waiting for pid:{stubborn.pid} to end (" in err


class SlowInfo(SlowJobs):
    """A controller that takes its time over each job's details."""

    def info(self, job_id: str) -> JobInfo:
        time.sleep(SLOW_S / 2)
        return JobInfo(job_id=job_id, state=JobState.COMPLETED, exit_code=0)


@pytest.fixture
def two_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    import guarded_sbatch.scheduler as schedulers
    from guarded_sbatch.records.registry import create_run

    monkeypatch.setenv("GUARDED_SBATCH_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(schedulers, "get_scheduler", lambda name=None: SlowInfo())
    return [create_run(f"mlp-lr{lr}", "local", str(job)).run_id for job, lr in ((41, "1e-3"), (42, "3e-4"))]


def test_status_on_a_slow_scheduler_says_so_and_counts_the_runs_asked(two_runs: list[str],
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from guarded_sbatch.cli.main import main

    assert main(["status"]) == 0
    out, err = capsys.readouterr()
    assert "mlp-lr1e-3" in out and "mlp-lr3e-4" in out
    lines = _said(err)
    assert lines[0] == "guarded-sbatch: waiting for the scheduler's word on 2 run(s)"
    assert any(line.endswith(" of 2 asked") for line in lines[1:]), lines


def test_show_on_a_slow_scheduler_says_what_it_waits_for(two_runs: list[str],
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from guarded_sbatch.cli.main import main

    assert main(["show", two_runs[0], "--plain"]) == 0
    lines = _said(capsys.readouterr().err)
    assert lines[0] == "guarded-sbatch: waiting for run mlp-lr1e-3's metrics to be read and judged, and its job's state"


def test_the_install_says_how_it_goes_between_pips_lines() -> None:
    """scripts/lib/venv.sh (the install and the demo's first run): a line at 5 s, then every 10 s, while pip runs."""
    import subprocess

    venv_sh = Path(__file__).resolve().parents[1] / "scripts" / "lib" / "venv.sh"
    done = subprocess.run(["bash", "-c", f"source {venv_sh}; sleep 6.5 & say_progress $! 'installing (log: x)'"],
                          capture_output=True, text=True, timeout=60, check=True)
    assert done.stderr.splitlines() == ["guarded-sbatch: still installing (log: x): 5 s so far"]


def test_a_launch_on_a_scheduler_slow_to_take_it_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    import re

    from guarded_sbatch.cli.main import main
    from guarded_sbatch.launch import pipeline

    class SlowToSubmit(DelegatingScheduler):
        def submit(self, request: SubmitRequest) -> str:
            time.sleep(SLOW_S / 2)  # sbatch against a busy slurmctld
            return super().submit(request)

    project = tmp_path / "project"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("events.out.tfevents.*", "__pycache__"))
    (tmp_path / "config.toml").write_text("")
    for name, value in (("GUARDED_SBATCH_STATE_DIR", tmp_path / "state"), ("GUARDED_SBATCH_BACKEND", "local"),
                        ("GUARDED_SBATCH_USER_CONFIG", tmp_path / "config.toml")):
        monkeypatch.setenv(name, str(value))
    monkeypatch.chdir(project)
    monkeypatch.setattr(pipeline, "get_scheduler", lambda name=None: SlowToSubmit(LocalScheduler()))
    code = main(["--parsable", "--job-name", "synthetic-tanh-mlp-bs64-lr5e-2-slow-sbatch", "--guard-tb", "runs/slow",
                 "train.sh", "--steps", "5", "--logdir", "runs/slow"])
    out, err = capsys.readouterr()
    for job in re.findall(r"\d+", out) + re.findall(r"sidecar job (\d+) watches", err):
        LocalScheduler().cancel(job)
    assert code == 0, err
    lines = _said(err)
    assert "guarded-sbatch: waiting for local to take the job and its guard" in lines, err


def test_a_sidecar_waiting_for_its_first_metrics_says_how_long_it_has_waited(tmp_path: Path) -> None:
    """`monitor` in the foreground (and a sidecar's output): the start-up grace is told at growing gaps."""
    import io

    from guarded_sbatch.sidecar.loop import Sidecar
    from guarded_sbatch.sidecar.plan import WatchPlan
    from guarded_sbatch.sources.run_sources import specs_from_flags

    class Clock:
        now = 1_796_000_000.0

        def __call__(self) -> float:
            return self.now

        def sleep(self, seconds: float) -> None:
            self.now += seconds
            if self.now - 1_796_000_000.0 > 400:
                raise StopIteration

    clock, out = Clock(), io.StringIO()
    settings = WatchPlan(run_name="r", job_id=None, state_file=tmp_path / "state.json",
                               evidence_dir=tmp_path / "evidence",
                               sources=specs_from_flags({"tensorboard": [tmp_path / "not-yet"]}),
                               sidecar=SidecarJobSettings(fast_interval_s=60, full_interval_s=1800),
                               startup_grace_s=300, startup_poll_s=10)
    with pytest.raises(StopIteration):
        Sidecar(settings, None, out, clock=clock, sleep=clock.sleep).run()
    said = [line for line in out.getvalue().splitlines() if line.startswith("sidecar: still no metrics after")]
    assert said == [f"sidecar: still no metrics after {t}; looking until 300 s, then a missing source is reported"
                    for t in ("10 s", "20 s", "40 s", "1 min 20 s", "2 min 40 s")]


def test_show_plain_on_a_terminal_is_wrapped_to_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """`show --plain` on a terminal: numbers instead of a plot, and its text within the terminal's width."""
    from guarded_sbatch.cli.show import render

    monkeypatch.setenv("COLUMNS", "61")
    name = "synthetic-tanh-mlp-bs64-lr15-diverging"
    view = {"run": name, "job_id": "3268", "state": "CANCELLED", "stopped_by": "guard", "exit": "0:15",
            "age": "0m34s", "elapsed": "0m06s", "source": f"/home/someone/projects/mlp/runs/{name}/tb",
            "decision_now": "STOP", "reason_now": "training loss exploded: " + "loss 137.5 at step 121, " * 6,
            "report": "- Reason: " + "a long reason that goes on " * 8, "plotted": {"train_loss": "train/loss"},
            "series": {"train/loss": ([1, 2, 3], [0.5, 0.4, 137.5])}, "anomalies": [], "evidence": [],
            "folder": f"/home/someone/.local/state/guarded-sbatch/runs/{name}-3268"}
    text = render(view, terminal=True, plain=True, color=False)
    assert "train/loss (train_loss), last 3 of 3 points:" in text  # the plain columns, not a plot
    assert max(len(line) for line in text.splitlines()) <= 60, text
    assert name in text.split()[1]  # the run's name whole in the title
