"""GuardedExecutor's submitit folder and the results it unpickles. Unpickling runs whatever the pickle's author put
in it, in the reader's process: so the folder is the user's own and private (0700; refused when another user owns
it or can write it), the job writes its files with umask 077, and a result is unpickled only when it is a regular
file of the user's that nobody else can write, in such a folder."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from submitit.core import utils

from guarded_sbatch.core.errors import UsageError
from guarded_sbatch.core.file_trust import writable_by_others
from guarded_sbatch.core.fsutil import make_private_dirs, owner_name

JOB_UMASK = "umask 077"  # the job's first setup line: its result pickle and logs are the user's alone


class UntrustedResultError(utils.UncompletedJobError):
    """A job's result that is not certainly the user's own: never unpickled."""


def private_job_folder(folder: Path) -> Path:
    """The executor's folder (its part before any %j/%A), made 0700 when new; refused, in one line, when another
    user owns it or can write it (a co-worker could plant a result, or the pickled function the job loads)."""
    base = utils.JobPaths.get_first_id_independent_folder(folder)
    make_private_dirs(base)
    info = os.stat(base)
    if info.st_uid != os.geteuid():
        raise UsageError(f"the executor's folder {base} belongs to {owner_name(info.st_uid)}, not you: refused (whoever "
                         "can write it decides what your jobs and job.result() run); give a folder of your own")
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o022:
        raise UsageError(f"the executor's folder {base} is writable by others (mode {mode:04o}): refused (a co-worker "
                         f"could plant what your jobs and job.result() unpickle); `chmod 700 {base}` or give a "
                         "private folder")
    return base


def make_job_folder(folder: Path) -> None:
    """One job's folder, 0700 (Slurm opens the job's output in it the moment the job starts)."""
    make_private_dirs(folder)


def check_result(job_folder: Path, result: Path) -> None:
    """Raise UntrustedResultError unless only the user can have written `result` (its folder the user's, writable
    by no one else; the file, when there, a regular file of the user's that no one else can write)."""
    try:
        folder = os.stat(job_folder)
    except OSError:
        return  # no folder, no result: submitit says the job left none
    problem = _not_private(job_folder, folder)
    if not problem:
        try:
            info = os.lstat(result)
        except FileNotFoundError:
            return
        if not stat.S_ISREG(info.st_mode):
            problem = f"{result} is not a regular file"
        elif info.st_uid != os.geteuid():
            problem = f"{result} belongs to {owner_name(info.st_uid)}"
        else:
            problem = writable_by_others(result, info)
    if problem:
        raise UntrustedResultError(f"not unpickling the job's result: {problem}; only a result nobody but you can have "
                                   "written is loaded (loading a pickle runs its author's code)")


def _not_private(folder: Path, info: os.stat_result) -> str:
    if info.st_uid != os.geteuid():
        return f"its folder {folder} belongs to {owner_name(info.st_uid)}"
    mode = stat.S_IMODE(info.st_mode)
    return f"its folder {folder} is writable by others (mode {mode:04o})" if mode & 0o022 else ""
