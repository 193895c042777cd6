"""A sweep launched from ONE project folder within one second (tests/sweep_runs.py): every sidecar reads its own
run's TensorBoard files, found by what the run's processes write (the pid in each event file's name, the files
they hold open), never a neighbour's, not the job's text log; the broken runs are stopped, the healthy ones
complete untouched.
- Lightning's default logger under `runs/<name>` (a config key `root_dir` no source kind knows, once called a data
  path that had to exist), every run's `lightning_logs/version_0` in one walk of the folder;
- the HF Trainer's default `logging_dir` (`outputs/<name>/runs/<date>_<host>`);
- a bare `SummaryWriter()`: all runs started in one second write ONE folder `runs/<date>_<host>`, told apart by
  the pid in their files' names only.
Local backend (six runs of the three kinds), and on the dev Slurm (Lightning, its folder named by its own key,
and SummaryWriter)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from e2e_helpers import Project, wait_for
from framework_runs import STOP_REASONS, metric_lines
from sweep_runs import HF, LIGHTNING, LIGHTNING_UNNAMED, SUMMARY_WRITER, Kind, Launched, launch_all, plan, sweep_project
from guarded_sbatch.scheduler.interface import JobState, Scheduler

pytestmark = pytest.mark.frameworks


def _wait(runs: list[Launched], scheduler: Scheduler, timeout: float) -> None:
    for run in runs:
        wait_for(lambda: scheduler.state(run.job_id).is_terminal, timeout, 1, f"{run.planned.name} to end")
        sidecar = run.record["sidecar_id"]
        wait_for(lambda: scheduler.state(sidecar).is_terminal, 90, 1, f"{run.planned.name}'s sidecar to end")


def _read_files(output: str) -> list[str]:
    """The event files the sidecar's reports name as read (their Evidence lines)."""
    files: list[str] = []
    for line in re.findall(r"^- Evidence: (.+)$", output, re.MULTILINE):
        files.extend(part for part in line.split(", ") if "tfevents" in part)
    return files


def _writer(event_file: str) -> str:
    """host.pid of an event file's name (events.out.tfevents.<time>.<host>.<pid>.<n>)."""
    name = Path(event_file).name.split(".tfevents.", 1)[1]
    return ".".join(name.split(".")[1:-1])


def assert_sweep(runs: list[Launched], project: Project, scheduler: Scheduler) -> None:
    project_state = project.state_dir
    writers: dict[str, set[str]] = {}
    for run in runs:
        run_dir = project_state / "runs" / run.record["run_id"]
        output = "".join(p.read_text(errors="replace") for p in sorted(run_dir.glob("sidecar-*.out")))
        where = f"{run.planned.name} (job {run.job_id})\n{output[-2500:]}"
        sources = re.findall(r"^- Data source: (\S+)$", output, re.MULTILINE)
        # the job's log may be judged before the trainer's first event is written, never after
        assert "tensorboard_ok" in sources and set(sources[sources.index("tensorboard_ok"):]) == {"tensorboard_ok"}, where
        judged = re.findall(rf"^- Run: \S+ \(job {run.job_id}\) — (.+)$", output, re.MULTILINE)
        assert judged and re.search(run.planned.kind.tb_folder.format(name=run.planned.name), judged[-1]), where
        files = _read_files(output)
        assert files, where
        writers[run.planned.name] = {_writer(f) for f in files}
        assert len(writers[run.planned.name]) == 1, (where, files)  # one writer: its own trainer, no neighbour
        state = scheduler.state(run.job_id)
        if run.planned.broken:
            assert state is JobState.CANCELLED and "- Decision: STOP" in output, where
            assert re.search(rf"- Reason: ({'|'.join(STOP_REASONS)})", output), where
        else:
            assert state is JobState.COMPLETED and "Decision: STOP" not in output, where
            assert "ended COMPLETED" in output and not re.search(r"=NaN\b|\bnan in ", metric_lines(output)), where
        shown = project.cli_here("show", run.record["run_id"]).stdout  # after the end: the same files, the same verdict
        # a run its guard stopped is shown with that STOP as it was taken; a healthy one judged now
        wanted = r"the guard's STOP at step" if run.planned.broken else r"judged now( at step \d+)?: CONTINUE"
        assert re.search(wanted, shown), (where, shown[:1500])
    every = [w for found in writers.values() for w in found]
    assert len(every) == len(set(every)), writers  # no two runs read one writer's files


def _sweep(tmp_path: Path, counts: dict[str, int], backend: str | None, timeout: float,
           lightning: Kind = LIGHTNING) -> None:
    kinds = {"lightning": lightning, "hf": HF, "summarywriter": SUMMARY_WRITER}
    project = sweep_project(tmp_path, [kinds[k] for k in counts])
    runs = launch_all(project, plan(project, counts, kinds), backend=backend)
    if backend == "local":
        from guarded_sbatch.scheduler.local import LocalScheduler

        scheduler: Scheduler = LocalScheduler(project.state_dir / "local-jobs")
    else:
        from guarded_sbatch.scheduler.slurm import SlurmScheduler

        scheduler = SlurmScheduler(state_dir=tmp_path / "test-slurm-cache")
    _wait(runs, scheduler, timeout)
    assert_sweep(runs, project, scheduler)


@pytest.mark.long
def test_six_runs_of_three_frameworks_from_one_folder(tmp_path: Path) -> None:
    """2 Lightning, 2 SummaryWriter, 2 HF Trainer runs started within one second; one of each kind broken. The
    Lightning runs' folder is named by a key no source kind knows: each is found by its event files' pid."""
    _sweep(tmp_path, {"lightning": 2, "summarywriter": 2, "hf": 2}, "local", timeout=480, lightning=LIGHTNING_UNNAMED)


@pytest.mark.slurm
@pytest.mark.long
def test_three_runs_of_one_folder_on_slurm(slurm_cluster: None, tmp_path: Path) -> None:
    """The same on the dev Slurm: two Lightning runs (the folder named by its own key) and two bare SummaryWriter runs
    (one shared folder), one of each broken. The HF Trainer's layout is the local sweep's and the Slurm framework
    test's (test_e2e_frameworks_slurm.py)."""
    _sweep(tmp_path, {"lightning": 2, "summarywriter": 2}, None, timeout=400)
