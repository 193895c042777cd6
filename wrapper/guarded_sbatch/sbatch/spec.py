"""sbatch 22.05's own options: which take a value, their short letters, their input environment variables.

Taken from Slurm 22.05's own option table (src/common/slurm_opt.c, the entries sbatch uses) and its environment
list (src/sbatch/opt.c), checked against the real sbatch by tests/test_sbatch_differential.py.
An option "takes a value" when getopt
would consume the next word (`-p gpu`, `--time 1:00:00`); an "optional" value must be attached with `=`
(`--exclusive=user`), exactly as getopt_long treats `optional_argument`.
"""

from __future__ import annotations

import enum


class ArgKind(enum.Enum):
    NONE = "none"  # a flag: --hold, --parsable
    REQUIRED = "required"  # --time 1:00:00 or --time=1:00:00
    OPTIONAL = "optional"  # --exclusive or --exclusive=user (never a separate word)


# long name -> (short letter or "", argument kind)
SBATCH_OPTIONS: dict[str, tuple[str, ArgKind]] = {
    "account": ("A", ArgKind.REQUIRED),
    "acctg-freq": ("", ArgKind.REQUIRED),
    "array": ("a", ArgKind.REQUIRED),
    "batch": ("", ArgKind.REQUIRED),
    "bb": ("", ArgKind.REQUIRED),
    "bbf": ("", ArgKind.REQUIRED),
    "begin": ("b", ArgKind.REQUIRED),
    "chdir": ("D", ArgKind.REQUIRED),
    "cluster-constraint": ("", ArgKind.REQUIRED),
    "cluster": ("", ArgKind.REQUIRED),  # alias of --clusters (its own table entry, so --cluste is ambiguous)
    "clusters": ("M", ArgKind.REQUIRED),
    "comment": ("", ArgKind.REQUIRED),
    "constraint": ("C", ArgKind.REQUIRED),
    "container": ("", ArgKind.REQUIRED),
    "context": ("", ArgKind.REQUIRED),
    "contiguous": ("", ArgKind.NONE),
    "core-spec": ("S", ArgKind.REQUIRED),
    "cores-per-socket": ("", ArgKind.REQUIRED),
    "cpu-freq": ("", ArgKind.REQUIRED),
    "cpus-per-gpu": ("", ArgKind.REQUIRED),
    "cpus-per-task": ("c", ArgKind.REQUIRED),
    "deadline": ("", ArgKind.REQUIRED),
    "delay-boot": ("", ArgKind.REQUIRED),
    "dependency": ("d", ArgKind.REQUIRED),
    "distribution": ("m", ArgKind.REQUIRED),
    "error": ("e", ArgKind.REQUIRED),
    "exclude": ("x", ArgKind.REQUIRED),
    "exclusive": ("", ArgKind.OPTIONAL),
    "export": ("", ArgKind.REQUIRED),
    "export-file": ("", ArgKind.REQUIRED),
    "extra-node-info": ("B", ArgKind.REQUIRED),
    "get-user-env": ("", ArgKind.OPTIONAL),
    "gid": ("", ArgKind.REQUIRED),
    "gpu-bind": ("", ArgKind.REQUIRED),
    "gpu-freq": ("", ArgKind.REQUIRED),
    "gpus": ("G", ArgKind.REQUIRED),
    "gpus-per-node": ("", ArgKind.REQUIRED),
    "gpus-per-socket": ("", ArgKind.REQUIRED),
    "gpus-per-task": ("", ArgKind.REQUIRED),
    "gres": ("", ArgKind.REQUIRED),
    "gres-flags": ("", ArgKind.REQUIRED),
    "help": ("h", ArgKind.NONE),
    "hint": ("", ArgKind.REQUIRED),
    "hold": ("H", ArgKind.NONE),
    "ignore-pbs": ("", ArgKind.NONE),
    "input": ("i", ArgKind.REQUIRED),
    "job-name": ("J", ArgKind.REQUIRED),
    "kill-on-invalid-dep": ("", ArgKind.REQUIRED),
    "licenses": ("L", ArgKind.REQUIRED),
    "mail-type": ("", ArgKind.REQUIRED),
    "mail-user": ("", ArgKind.REQUIRED),
    "mcs-label": ("", ArgKind.REQUIRED),
    "mem": ("", ArgKind.REQUIRED),
    "mem-bind": ("", ArgKind.REQUIRED),
    "mem-per-cpu": ("", ArgKind.REQUIRED),
    "mem-per-gpu": ("", ArgKind.REQUIRED),
    "mincpus": ("", ArgKind.REQUIRED),
    "network": ("", ArgKind.REQUIRED),
    "nice": ("", ArgKind.OPTIONAL),
    "no-kill": ("k", ArgKind.OPTIONAL),
    "no-requeue": ("", ArgKind.NONE),
    "nodefile": ("F", ArgKind.REQUIRED),
    "nodelist": ("w", ArgKind.REQUIRED),
    "nodes": ("N", ArgKind.REQUIRED),
    "ntasks": ("n", ArgKind.REQUIRED),
    "ntasks-per-core": ("", ArgKind.REQUIRED),
    "ntasks-per-gpu": ("", ArgKind.REQUIRED),
    "ntasks-per-node": ("", ArgKind.REQUIRED),
    "ntasks-per-socket": ("", ArgKind.REQUIRED),
    "ntasks-per-tres": ("", ArgKind.REQUIRED),
    "open-mode": ("", ArgKind.REQUIRED),
    "output": ("o", ArgKind.REQUIRED),
    "overcommit": ("O", ArgKind.NONE),
    "oversubscribe": ("s", ArgKind.NONE),
    "parsable": ("", ArgKind.NONE),
    "partition": ("p", ArgKind.REQUIRED),
    "power": ("", ArgKind.REQUIRED),
    "prefer": ("", ArgKind.REQUIRED),
    "priority": ("", ArgKind.REQUIRED),
    "profile": ("", ArgKind.REQUIRED),
    "propagate": ("", ArgKind.OPTIONAL),
    "qos": ("q", ArgKind.REQUIRED),
    "quiet": ("Q", ArgKind.NONE),
    "reboot": ("", ArgKind.NONE),
    "requeue": ("", ArgKind.NONE),
    "reservation": ("", ArgKind.REQUIRED),
    "signal": ("", ArgKind.REQUIRED),
    "sockets-per-node": ("", ArgKind.REQUIRED),
    "spread-job": ("", ArgKind.NONE),
    "switches": ("", ArgKind.REQUIRED),
    "tasks-per-node": ("", ArgKind.REQUIRED),  # alias of --ntasks-per-node (same getopt value)
    "test-only": ("", ArgKind.NONE),
    "thread-spec": ("", ArgKind.REQUIRED),
    "threads-per-core": ("", ArgKind.REQUIRED),
    "time": ("t", ArgKind.REQUIRED),
    "time-min": ("", ArgKind.REQUIRED),
    "tmp": ("", ArgKind.REQUIRED),
    "uid": ("", ArgKind.REQUIRED),
    "usage": ("", ArgKind.NONE),
    "use-min-nodes": ("", ArgKind.NONE),
    "verbose": ("v", ArgKind.NONE),
    "version": ("V", ArgKind.NONE),
    "wait": ("W", ArgKind.NONE),
    "wait-all-nodes": ("", ArgKind.REQUIRED),
    "wckey": ("", ArgKind.REQUIRED),
    "wrap": ("", ArgKind.REQUIRED),
}

SHORT_TO_LONG: dict[str, str] = {short: long for long, (short, _) in SBATCH_OPTIONS.items() if short}

# Two names, one option. getopt_long treats prefixes of names with the same value as one match
# (--tasks -> --tasks-per-node); --cluster has its own value in Slurm's table, so --cluste is ambiguous.
ALIASES: dict[str, str] = {"cluster": "clusters", "tasks-per-node": "ntasks-per-node"}
_SAME_GETOPT_VALUE: dict[str, str] = {"tasks-per-node": "ntasks-per-node"}

# sbatch reads these only from its command line (its "early pass"); in #SBATCH lines they are skipped silently.
EARLY_PASS_OPTIONS = frozenset({"help", "usage", "version", "verbose", "quiet", "wrap"})

# Values sbatch reads with parse_int(..., positive): a whole number > 0, else it refuses the job.
POSITIVE_INT_OPTIONS = frozenset({
    "cores-per-socket", "cpus-per-task", "mincpus", "ntasks", "ntasks-per-core", "ntasks-per-gpu", "ntasks-per-node",
    "ntasks-per-socket", "ntasks-per-tres", "sockets-per-node", "thread-spec", "threads-per-core",
})

# Input environment variables -> the long option they stand for, in the order sbatch applies them (a later
# variable wins: SLURM_CLUSTERS over SBATCH_CLUSTERS, SBATCH_HINT over SLURM_HINT). src/sbatch/opt.c env_vars[].
SBATCH_ENV_VARS: dict[str, str] = {
    "SBATCH_ACCOUNT": "account",
    "SBATCH_ARRAY_INX": "array",
    "SBATCH_ACCTG_FREQ": "acctg-freq",
    "SBATCH_BATCH": "batch",
    "SBATCH_BURST_BUFFER": "bb",
    "SBATCH_CLUSTER_CONSTRAINT": "cluster-constraint",
    "SBATCH_CLUSTERS": "clusters",
    "SLURM_CLUSTERS": "clusters",
    "SBATCH_CONTAINER": "container",
    "SBATCH_CONSTRAINT": "constraint",
    "SBATCH_CORE_SPEC": "core-spec",
    "SBATCH_CPU_FREQ_REQ": "cpu-freq",
    "SBATCH_CPUS_PER_GPU": "cpus-per-gpu",
    "SBATCH_DEBUG": "verbose",
    "SBATCH_DELAY_BOOT": "delay-boot",
    "SBATCH_DISTRIBUTION": "distribution",
    "SBATCH_EXCLUSIVE": "exclusive",
    "SBATCH_EXPORT": "export",
    "SBATCH_GET_USER_ENV": "get-user-env",
    "SBATCH_GRES": "gres",
    "SBATCH_GRES_FLAGS": "gres-flags",
    "SBATCH_GPUS": "gpus",
    "SBATCH_GPU_BIND": "gpu-bind",
    "SBATCH_GPU_FREQ": "gpu-freq",
    "SBATCH_GPUS_PER_NODE": "gpus-per-node",
    "SBATCH_GPUS_PER_SOCKET": "gpus-per-socket",
    "SBATCH_GPUS_PER_TASK": "gpus-per-task",
    "SLURM_HINT": "hint",
    "SBATCH_HINT": "hint",
    "SBATCH_JOB_NAME": "job-name",
    "SBATCH_MEM_BIND": "mem-bind",
    "SBATCH_MEM_PER_CPU": "mem-per-cpu",
    "SBATCH_MEM_PER_GPU": "mem-per-gpu",
    "SBATCH_MEM_PER_NODE": "mem",
    "SBATCH_NETWORK": "network",
    "SBATCH_NO_KILL": "no-kill",
    "SBATCH_NO_REQUEUE": "no-requeue",
    "SBATCH_OPEN_MODE": "open-mode",
    "SBATCH_OVERCOMMIT": "overcommit",
    "SBATCH_PARTITION": "partition",
    "SBATCH_POWER": "power",
    "SBATCH_PROFILE": "profile",
    "SBATCH_QOS": "qos",
    "SBATCH_REQ_SWITCH": "switches",
    "SBATCH_REQUEUE": "requeue",
    "SBATCH_RESERVATION": "reservation",
    "SBATCH_SIGNAL": "signal",
    "SBATCH_SPREAD_JOB": "spread-job",
    "SBATCH_THREAD_SPEC": "thread-spec",
    "SBATCH_THREADS_PER_CORE": "threads-per-core",
    "SBATCH_TIMELIMIT": "time",
    "SBATCH_USE_MIN_NODES": "use-min-nodes",
    "SBATCH_WAIT": "wait",
    "SBATCH_WAIT_ALL_NODES": "wait-all-nodes",
    "SBATCH_WCKEY": "wckey",
    "SBATCH_ERROR": "error",
    "SBATCH_INPUT": "input",
    "SBATCH_OUTPUT": "output",
}


def canonical_name(name: str) -> str:
    return ALIASES.get(name, name)


def long_candidates(word: str) -> list[str]:
    """The long options `word` (without dashes) may stand for: itself when exact, else every name it prefixes."""
    if word in SBATCH_OPTIONS:
        return [word]
    return [name for name in SBATCH_OPTIONS if name.startswith(word)]


def resolve_long_name(word: str) -> str | None:
    """The long option for `word`, as glibc's getopt_long picks it: an exact name, else the only name it prefixes;
    several prefixed names count as one when they are the same option (same getopt value and argument kind)."""
    matches = long_candidates(word)
    if not matches:
        return None
    first = _SAME_GETOPT_VALUE.get(matches[0], matches[0])
    if all(_SAME_GETOPT_VALUE.get(name, name) == first for name in matches):
        return matches[0]
    return None
