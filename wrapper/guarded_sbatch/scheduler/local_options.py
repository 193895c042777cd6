"""What the local backend reads of sbatch's options: the job's name, output, limits, dependency, a job array
(`--array 0-7%2`, `1,3,5`, `0-15:4`) and the SLURM_* variables each job or array task is given."""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path

from guarded_sbatch.core.errors import UsageError
from guarded_sbatch.sbatch.filename_pattern import expand_filename_pattern
from guarded_sbatch.sbatch.argv import parse_sbatch_words
from guarded_sbatch.sbatch.array import ArraySpec, parse_array_spec
from guarded_sbatch.sbatch.options import effective_options
from guarded_sbatch.sbatch.script import parse_script


@dataclass(frozen=True)
class LocalOptions:
    job_name: str
    output: str
    error: str | None
    chdir: str | None
    time_limit_s: int | None
    after_job: str | None
    kill_on_invalid_dep: bool
    ntasks: str | None = None
    cpus_per_task: str | None = None
    partition: str | None = None
    array: ArraySpec | None = None
    append: bool = False  # --open-mode=append; sbatch truncates by default


def parse_local_options(options: tuple[str, ...], script: Path, env: dict[str, str]) -> LocalOptions:
    """The options the local backend honours, with sbatch's precedence (command line > SBATCH_* >
    #SBATCH lines); options that change when the job runs are refused, every other option is accepted
    and ignored."""

    parsed, _ = parse_sbatch_words(list(options))
    directives = [(f"{script} line {d.line_number}", o) for d in parse_script(script, env).directives for o in d.options]
    effective = effective_options(parsed, directives, env)
    for option, what in (("hold", "a held job"), ("begin", "a deferred start")):
        if effective.has(option):  # accepted and ignored, they would run something other than what was asked
            raise UsageError(f"the local backend runs each job now: it cannot run {what} (--{option}); "
                             "drop the option, or submit to Slurm (--guard-backend slurm)")
    dependency = effective.get("dependency") or ""
    after_job = None
    if dependency:
        kind, _, job = dependency.partition(":")
        after_job = job.split(":")[0]
        if kind != "after" or not re.fullmatch(r"\d+(_\d+)?", after_job):
            raise UsageError(f"the local backend understands only --dependency=after:ID, not {dependency!r}")
    mode = (effective.get("open-mode") or "truncate").lower()
    if mode not in ("append", "truncate"):
        raise UsageError(f"--open-mode={mode}: use append or truncate")
    array_text = effective.get("array")
    array = parse_array_spec(array_text) if array_text else None
    kill_flag = (effective.get("kill-on-invalid-dep") or "yes").lower() in {"yes", "true", "1"}
    return LocalOptions(
        job_name=effective.job_name or "",
        output=effective.get("output") or ("slurm-%A_%a.out" if array else "slurm-%j.out"),  # sbatch's defaults
        error=effective.get("error"),
        chdir=effective.get("chdir"),
        time_limit_s=effective.time_limit_s,
        after_job=after_job,
        kill_on_invalid_dep=kill_flag if effective.has("kill-on-invalid-dep") else False,
        ntasks=effective.get("ntasks") or effective.get("ntasks-per-node"),  # one node: the same count
        cpus_per_task=effective.get("cpus-per-task"),
        partition=effective.get("partition"),
        array=array,
        append=mode == "append",
    )


@dataclass(frozen=True)
class TaskIds:
    """One job of a submission: its own job id and, for an array task, the array's id and its task id."""

    job_id: str
    array_job: str | None = None
    task: int | None = None

    @property
    def key(self) -> str:
        """How the job is named to the scheduler: `<array>_<task>` for an array task, as Slurm names it."""
        return f"{self.array_job}_{self.task}" if self.array_job is not None else self.job_id


def array_task_ids(first_id: int, array: ArraySpec) -> list[TaskIds]:
    """The jobs of an array submitted as `first_id`: as on Slurm, the last task keeps the array's id and every
    other task gets an id of its own (here the ones that follow, reserved together)."""
    array_job = str(first_id)
    others = iter(range(first_id + 1, first_id + array.count))
    return [TaskIds(job_id=array_job if task == array.tasks[-1] else str(next(others)), array_job=array_job, task=task)
            for task in array.tasks]


def job_variables(options: LocalOptions, *, job_id: str, job_name: str, submit_dir: Path, user: str,
                  task: TaskIds | None = None) -> dict[str, str]:
    """The SLURM_* variables a batch script reads, true to what the local backend runs: one task on this host."""
    host = socket.gethostname()
    node = host.split(".")[0]
    ntasks = options.ntasks or "1"
    values = {
        "SLURM_JOB_ID": job_id, "SLURM_JOBID": job_id, "SLURM_JOB_NAME": job_name,
        "SLURM_SUBMIT_DIR": str(submit_dir), "SLURM_SUBMIT_HOST": host, "SLURM_CLUSTER_NAME": "local",
        "SLURM_NTASKS": ntasks, "SLURM_NPROCS": ntasks, "SLURM_JOB_NUM_NODES": "1", "SLURM_NNODES": "1",
        "SLURM_NODELIST": node, "SLURM_JOB_NODELIST": node, "SLURMD_NODENAME": node, "SLURM_TOPOLOGY_ADDR": node,
        "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_JOB_USER": user,
        "SLURM_JOB_UID": str(os.getuid()), "SLURM_JOB_GID": str(os.getgid()),
    }
    if options.cpus_per_task:
        values["SLURM_CPUS_PER_TASK"] = options.cpus_per_task
    if options.partition:
        values["SLURM_JOB_PARTITION"] = options.partition
    if options.array and task is not None and task.array_job is not None:
        values.update({
            "SLURM_ARRAY_JOB_ID": task.array_job, "SLURM_ARRAY_TASK_ID": str(task.task),
            "SLURM_ARRAY_TASK_COUNT": str(options.array.count), "SLURM_ARRAY_TASK_MIN": str(options.array.tasks[0]),
            "SLURM_ARRAY_TASK_MAX": str(options.array.tasks[-1]), "SLURM_ARRAY_TASK_STEP": str(options.array.step),
        })
    return values


KEPT_SLURM_ENV = ("SLURM_CONF", "SLURM_TIME_FORMAT")  # how Slurm's own commands are reached, not what the job is


def expand_output_pattern(pattern: str, job_id: str, job_name: str, user: str, task: TaskIds | None = None) -> str:
    """sbatch's filename pattern on this machine (%j %x %u %A %a %N; %a of a job that is no array is
    4294967294, as Slurm writes it)."""
    in_array = task is not None and task.array_job is not None
    return expand_filename_pattern(pattern, job_id=job_id, job_name=job_name, user=user,
                                   node=socket.gethostname().split(".")[0],
                                   array_job=task.array_job if task is not None and in_array else None,
                                   array_task=str(task.task) if task is not None and in_array else "4294967294")


def without_slurm_job(env: dict[str, str]) -> dict[str, str]:
    """The submitting environment less the SLURM_* variables of a job it may itself run in (salloc, srun)."""
    return {k: v for k, v in env.items() if not k.startswith(("SLURM_", "SLURMD_")) or k in KEPT_SLURM_ENV}
