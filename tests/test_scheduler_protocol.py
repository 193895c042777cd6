"""Every scheduler answers every member of the Scheduler protocol: what a backend cannot do is an answer (an empty
list, None, False, a one-line SchedulerError), never a missing method; wrappers hand each member on by name."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from e2e_helpers import wait_for
from guarded_sbatch.actions.stop_targets import parse_stop_target
from guarded_sbatch.actions.target_watch import TargetWatch
from guarded_sbatch.core.errors import SchedulerError, UsageError
from guarded_sbatch.scheduler.delegating import DelegatingScheduler
from guarded_sbatch.scheduler.interface import JobState, Scheduler, SubmitRequest
from guarded_sbatch.scheduler.local import LocalScheduler
from guarded_sbatch.sidecar.counted import CountedScheduler
from guarded_sbatch.launch.marking import MarkingScheduler

PROTOCOL_MEMBERS = sorted(name for name in vars(Scheduler) if not name.startswith("_"))


def _running_job(tmp_path: Path) -> tuple[LocalScheduler, str]:
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\nsleep 60\n", encoding="utf-8")
    scheduler = LocalScheduler(tmp_path / "jobs")
    job_id = scheduler.submit(SubmitRequest(script=script, workdir=tmp_path))
    wait_for(lambda: scheduler.state(job_id) is JobState.RUNNING, 30, what="the local job to start")
    return scheduler, job_id


def _one_line_requeue_error(scheduler: Scheduler, job_id: str) -> str:
    with pytest.raises(SchedulerError) as caught:
        scheduler.requeue(job_id)
    message = str(caught.value)
    assert "\n" not in message and "cannot requeue" in message and job_id in message
    return message


def test_the_local_backend_answers_what_it_cannot_do_as_data(tmp_path: Path) -> None:
    scheduler, job_id = _running_job(tmp_path)
    try:
        assert (scheduler.name, scheduler.traits.free_state_queries, scheduler.traits.supports_requeue) == ("local", True, False)
        assert scheduler.states([job_id]) == {job_id: JobState.RUNNING}
        with pytest.raises(SchedulerError, match="no local job 999999"):  # as state() says of it
            scheduler.states([job_id, "999999"])
        assert scheduler.node_losses(job_id) == []
        assert scheduler.watch_job_end(job_id) is None
        _one_line_requeue_error(scheduler, job_id)
        with pytest.raises(UsageError, match="unknown signal 'NOPE'"):
            scheduler.cancel(job_id, signal_name="NOPE")
        assert scheduler.state(job_id) is JobState.RUNNING  # a bad signal name sends nothing
    finally:
        scheduler.cancel(job_id)
    wait_for(lambda: scheduler.state(job_id).is_terminal, 30, what="the cancelled job to end")


def test_a_stop_target_answers_every_member() -> None:
    target = TargetWatch(parse_stop_target(f"pid:{os.getpid()}"))
    assert (target.name, target.traits.free_state_queries, target.traits.supports_requeue) == ("local", True, False)
    assert target.states([str(os.getpid())]) == {str(os.getpid()): JobState.RUNNING}
    assert (target.node_losses("x"), target.watch_job_end("x")) == ([], None)
    _one_line_requeue_error(target, str(os.getpid()))


def test_the_wrappers_declare_every_member_and_hand_it_on(tmp_path: Path) -> None:
    for wrapper in (DelegatingScheduler, CountedScheduler, MarkingScheduler):
        assert "__getattr__" not in {name for klass in wrapper.__mro__ for name in vars(klass)}
        missing = [name for name in PROTOCOL_MEMBERS if not any(name in vars(k) for k in wrapper.__mro__[:-1])]
        assert missing == [], f"{wrapper.__name__} does not declare {missing}"
    scheduler, job_id = _running_job(tmp_path)
    try:
        marked = MarkingScheduler(scheduler, tmp_path / "job.sh", ())
        counted = CountedScheduler(marked)
        assert (counted.name, counted.traits.free_state_queries, counted.traits.supports_requeue) == ("local", True, False)
        assert counted.states([job_id]) == {job_id: JobState.RUNNING} and counted.count == 1
        assert counted.watch_job_end(job_id) is None and counted.count == 1  # no watch, no call
        assert counted.node_losses(job_id) == [] and counted.current_user() == scheduler.current_user()
        assert counted.info(job_id).state is JobState.RUNNING and counted.count == 2
        _one_line_requeue_error(counted, job_id)
        assert counted.count == 3
    finally:
        scheduler.cancel(job_id)
    wait_for(lambda: scheduler.state(job_id).is_terminal, 30, what="the cancelled job to end")


def test_the_checker_refuses_a_probe_in_a_wrapper(tmp_path: Path) -> None:
    """A wrapper that forwards through __getattr__ is what tests/test_architecture.py refuses; written as one
    would, it is caught with its line."""
    sys.path.insert(0, str(Path(__file__).parent))
    from test_architecture import _probes  # the architecture test's own checker

    sample = tmp_path / "wrapper.py"
    sample.write_text("class Wrapped:\n    def __getattr__(self, name):\n        return getattr(self.inner, name)\n",
                      encoding="utf-8")
    assert [line.split(":")[0] for line in _probes(sample, "sidecar/wrapper.py")] == ["2", "3"]
