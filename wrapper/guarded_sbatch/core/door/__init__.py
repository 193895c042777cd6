"""The door: every open, read, write, lock and delete of guarded-sbatch goes through this package (a test,
tests/test_door.py, fails on a file access anywhere else). Three rules hold for every call:

- Know who can write it: each read returns the bytes with their `Writers` (owner, mode bits, ACL, the folders
  above: trust.py), so a caller weighs them without asking separately.
- Never block: regular files only, opened O_NONBLOCK (a FIFO, a device, a socket is refused and named); every
  lock is taken with LOCK_NB polled up to a deadline (`LockTimeoutError` names the file, never a hang).
- Never follow: outputs are created relative to their folder's descriptor, O_NOFOLLOW, O_EXCL where they must be
  new; a link at an output path is refused and named (`LinkRefusedError`), never written through or chmod'ed.
Reads are reading.py's, writes (and folders, renames, removals, locks) writing.py's, what either refuses
refusals.py's; deletion of a tree (tree.py) walks from a folder descriptor checked against the device and inode the
plan saw. Callers use this package's names (`door.read`, `door.write_atomic`), not those three modules.
"""

from __future__ import annotations

from guarded_sbatch.core.door import trust
from guarded_sbatch.core.door.reading import READ_DEADLINE_S, Opened, Read, opened, pread_all, read
from guarded_sbatch.core.door.refusals import (LinkRefusedError, LockTimeoutError, NotOwnError, NotRegularError,
                                               TooLargeError, kind_of)
from guarded_sbatch.core.door.special import (anonymous_file, lock_file, make_temp_dir, open_raw, private_temp_dir,
                                              read_proc, remove_own_temp_dir)
from guarded_sbatch.core.door.trust import Writers, writers_of
from guarded_sbatch.core.door.writing import (LOCK_DEADLINE_S, append, chmod_own_folder, lock, locked, make_dirs,
                                              make_new_dir, make_private_dirs, open_dir, remove, rename, write_atomic,
                                              write_new)

__all__ = ["Read", "Writers", "Opened", "NotRegularError", "NotOwnError", "LinkRefusedError", "LockTimeoutError",
           "TooLargeError", "read", "opened", "lock", "write_atomic", "write_new", "append", "open_dir",
           "make_private_dirs", "make_new_dir", "remove", "rename", "writers_of", "kind_of",
           "anonymous_file", "lock_file",
           "make_temp_dir", "open_raw", "private_temp_dir", "read_proc", "remove_own_temp_dir", "make_dirs",
           "chmod_own_folder", "pread_all", "locked", "trust", "READ_DEADLINE_S", "LOCK_DEADLINE_S"]
