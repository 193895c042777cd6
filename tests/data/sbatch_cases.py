"""The differential battery: command lines, scripts and SBATCH_* inputs fed to both the real sbatch 22.05 and
guarded-sbatch's parser (tests/test_sbatch_differential.py).

A case is sbatch's argv after `sbatch` (the script path is appended unless `no_script`), the lines between the
`#!/bin/bash` line and the body (`directives`), or a whole `script` text, and extra environment variables.

`intended` (when set) explains why guarded-sbatch is meant to answer differently from sbatch; the test then
checks that the difference is exactly the documented one (`intended_verdict`: guarded's accept/reject).

Resources this one-node dev cluster lacks (GPUs, features, licenses, a `gpu` partition, other accounts) make
slurmctld refuse the job after sbatch has parsed it: the test counts that as "parsed" (sbatch printed its
`-v` list of defined options, or the error came back from the controller) and compares only the parse.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Case:
    id: str
    args: tuple[str, ...] = ()
    directives: tuple[str, ...] = ()
    script: str | None = None  # the whole script text (bytes as latin-1 escapes allowed); overrides directives
    env: dict[str, str] = field(default_factory=dict)
    no_script: bool = False  # --wrap, --help, --version, --usage
    verbose: bool = True  # run real sbatch with -v to read its parsed options (off with -Q: -v and -Q conflict)
    intended: str = ""  # why guarded-sbatch answers differently on purpose
    intended_verdict: bool | None = None  # guarded's accept (True) / reject (False) when intended
    het: bool = False  # a heterogeneous job: sbatch's -v list shows the last component; compare what Slurm stored

    def script_text(self) -> str:
        if self.script is not None:
            return self.script
        return "#!/bin/bash\n" + "".join(line + "\n" for line in self.directives) + "hostname\n"


def _c(id: str, *args: str, **kw: object) -> Case:
    return Case(id, tuple(args), **kw)  # type: ignore[arg-type]


def _d(id: str, *lines: str, **kw: object) -> Case:
    return Case(id, (), tuple(lines), **kw)  # type: ignore[arg-type]


NEGATIVE = (
    "sbatch reads '-5' as minus five days and stores a wrapped limit of about 8000 years; guarded-sbatch refuses "
    "a negative limit with one line"
)
SBATCH_CHECKS_IT = (
    "sbatch checks this option's value itself; the pre-flight does not read the option, so guarded-sbatch hands "
    "it on unchanged and sbatch refuses the job with its own message"
)
UNKNOWN_PASSES = (
    "an unknown --name=VALUE is handed on to sbatch, which judges it (a newer sbatch may know it); sbatch 22.05 "
    "refuses it with its own message"
)
OVERFLOW = (
    "Slurm stores this count in a C int and wraps it silently (or reads undefined values); guarded-sbatch "
    "refuses it with one line instead of judging the job on a wrapped number"
)

# One valid value per option sbatch 22.05 documents (long form with `=`). Values the dev cluster cannot honour
# still parse.
OPTION_VALUES: dict[str, str] = {
    "account": "root",
    "acctg-freq": "task=30",
    "array": "0-3",
    "batch": "x86_64",
    "bb": "capacity=1G",
    "begin": "now+1hour",
    "chdir": "/tmp",
    "cluster-constraint": "east",
    "cluster": "dev",
    "clusters": "dev",
    "comment": "hello",
    "constraint": "a100",
    "container": "/tmp",
    "contiguous": "",
    "core-spec": "1",
    "cores-per-socket": "1",
    "cpu-freq": "high",
    "cpus-per-gpu": "2",
    "cpus-per-task": "1",
    "deadline": "now+2days",
    "delay-boot": "5",
    "dependency": "singleton",
    "distribution": "block",
    "error": "err-%j.txt",
    "exclude": "nonode[1-2]",
    "exclusive": "",
    "export": "ALL",
    "extra-node-info": "1:1:1",
    "get-user-env": "",
    "gid": "0",
    "gpu-bind": "closest",
    "gpu-freq": "high",
    "gpus": "1",
    "gpus-per-node": "2",
    "gpus-per-socket": "1",
    "gpus-per-task": "1",
    "gres": "gpu:2",
    "gres-flags": "enforce-binding",
    "hint": "nomultithread",
    "hold": "",
    "ignore-pbs": "",
    "input": "/dev/null",
    "job-name": "job1",
    "kill-on-invalid-dep": "yes",
    "licenses": "lic:1",
    "mail-type": "END,FAIL",
    "mail-user": "a@example.com",
    "mcs-label": "x",
    "mem": "100M",
    "mem-bind": "local",
    "mem-per-cpu": "100M",
    "mem-per-gpu": "1G",
    "mincpus": "1",
    "network": "none",
    "nice": "",
    "no-kill": "",
    "no-requeue": "",
    "nodelist": "localhost",
    "nodes": "1",
    "ntasks": "2",
    "ntasks-per-core": "1",
    "ntasks-per-gpu": "1",
    "ntasks-per-node": "2",
    "ntasks-per-socket": "1",
    "ntasks-per-tres": "1",
    "open-mode": "append",
    "output": "out-%j.txt",
    "overcommit": "",
    "oversubscribe": "",
    "parsable": "",
    "partition": "debug",
    "power": "level",
    "prefer": "fast",
    "priority": "10",
    "profile": "none",
    "propagate": "",
    "qos": "normal",
    "reboot": "",
    "requeue": "",
    "reservation": "nores",
    "signal": "B:USR1@90",
    "sockets-per-node": "1",
    "spread-job": "",
    "switches": "1@10:00",
    "tasks-per-node": "2",
    "test-only": "",
    "thread-spec": "1",
    "threads-per-core": "1",
    "time": "10",
    "time-min": "5",
    "tmp": "1G",
    "uid": "0",
    "use-min-nodes": "",
    "wait-all-nodes": "1",
    "wckey": "wk",
}

SHORT_VALUES: dict[str, str] = {
    "A": "root", "a": "1-2", "b": "now", "D": "/tmp", "M": "dev", "C": "v100", "S": "1", "c": "1",
    "d": "singleton", "m": "cyclic", "e": "e.txt", "x": "nonode1", "B": "1", "G": "1", "i": "/dev/null",
    "J": "shortname", "L": "lic:1", "w": "localhost", "N": "1", "n": "1", "o": "o.txt", "p": "debug",
    "q": "normal", "t": "30",
}


def _option_cases() -> list[Case]:
    cases: list[Case] = []
    for name, value in OPTION_VALUES.items():
        cases.append(_c(f"long={name}", f"--{name}={value}" if value else f"--{name}"))
        if value and name not in ("exclusive", "nice", "get-user-env", "propagate"):
            cases.append(_c(f"long-space:{name}", f"--{name}", value))
    for letter, value in SHORT_VALUES.items():
        cases.append(_c(f"short-attached:-{letter}", f"-{letter}{value}"))
        cases.append(_c(f"short-space:-{letter}", f"-{letter}", value))
    for letter in "HOsk":
        cases.append(_c(f"short-flag:-{letter}", f"-{letter}"))
    return cases


SPECIAL_CASES: list[Case] = [
    # --- flags that only print -------------------------------------------------------------------------------
    _c("help", "--help", no_script=True),
    _c("usage", "--usage", no_script=True),
    _c("version", "--version", no_script=True),
    _c("version-short", "-V", no_script=True),
    _c("help-short", "-h", no_script=True),
    _c("quiet", "-Q", verbose=False),
    _c("quiet-long", "--quiet", verbose=False),
    _c("quiet-and-verbose", "-Q", "-v", verbose=False),
    _c("verbose-twice", "-vv"),
    _c("wrap", "--wrap=hostname", no_script=True),
    _c("wrap-space", "--wrap", "echo a;echo b|cat&&true", no_script=True),
    _c("wrap-with-script-args", "--wrap=hostname", "extra", no_script=True),
    _c("wrap-and-script", "--wrap=hostname"),
    # --- bundled short options -------------------------------------------------------------------------------
    _c("bundle-HO", "-HO"),
    _c("bundle-Hs-N1", "-HsN1"),
    _c("bundle-HJname", "-HJbundled"),
    _c("bundle-OJ-space", "-OJ", "bundled2"),
    _c("bundle-t-in-middle", "-Ht10"),
    _c("bundle-k-swallows", "-kH"),
    _c("bundle-unknown-letter", "-Hy"),
    _c("short-equals", "-t=10"),
    _c("short-missing-value", "-t", no_script=True),
    _c("short-unknown", "-y"),
    _c("short-k-attached-off", "-koff"),
    # --- long-option abbreviations (getopt_long unique prefixes) ---------------------------------------------
    _c("abbr-par", "--par=debug"),
    _c("abbr-job", "--job=abbrev"),
    _c("abbr-tim-ambiguous", "--tim=10"),
    _c("abbr-nod-ambiguous", "--nod=1"),
    _c("abbr-nodes-exact", "--nodes=1"),
    _c("abbr-ntasks-per-n", "--ntasks-per-n=2"),
    _c("abbr-clust-ambiguous", "--clust=dev"),
    _c("abbr-gpus-per-ambiguous", "--gpus-per=2"),
    _c("abbr-exc-ambiguous", "--exc"),
    _c("abbr-exclusive-exact", "--exclusive"),
    _c("abbr-wr", "--wr=hostname", no_script=True),
    _c("abbr-out", "--out=abbr.out"),
    _c("abbr-err", "--err=abbr.err"),
    _c("abbr-cons", "--cons=a100"),
    _c("abbr-con-ambiguous", "--con=a100"),
    _c("abbr-tasks", "--tasks=2"),
    _c("abbr-mem-per-ambiguous", "--mem-per=1G"),
    _c("abbr-ho", "--ho"),
    _c("abbr-gp-ambiguous", "--gp=1"),
    _c("abbr-gres-exact", "--gres=gpu:1"),
    _c("abbr-arr", "--arr=1-3"),
    _c("abbr-par-space", "--par", "debug"),
    # --- aliases -------------------------------------------------------------------------------------------
    _c("alias-cluster", "--cluster=dev"),
    _c("alias-cluster-space", "--cluster", "dev"),
    _c("alias-tasks-per-node", "--tasks-per-node", "4"),
    _c("alias-tasks-and-ntasks", "--ntasks-per-node=2", "--tasks-per-node=3"),
    _c("alias-dir-chdir", "--chdir=/tmp"),
    # --- = vs space, values, flags with values ---------------------------------------------------------------
    _c("flag-with-value", "--hold=yes"),
    _c("missing-value-end", "--time", no_script=True),
    _c("unknown-long", "--no-such-option"),
    _c("unknown-long-value", "--no-such-option=1", intended=UNKNOWN_PASSES, intended_verdict=True),
    _c("double-dash", "--", ),
    _c("double-dash-then-option", "--time=10", "--"),
    _c("exclusive-space-takes-script", "--exclusive", "user"),
    _c("exclusive-user", "--exclusive=user"),
    _c("exclusive-mcs", "--exclusive=mcs"),
    _c("nice-value", "--nice=10"),
    _c("no-kill-off", "--no-kill=off"),
    _c("get-user-env-value", "--get-user-env=10L"),
    _c("propagate-value", "--propagate=CORE"),
    _c("empty-job-name", "--job-name="),
    _c("last-wins", "-t", "10", "-t", "20"),
    # --- values with | & ; , : % ----------------------------------------------------------------------------
    _c("constraint-or", "--constraint=a100|h100"),
    _c("constraint-and", "--constraint=a100&ib"),
    _c("constraint-count", "--constraint=[rack1*2&rack2*4]"),
    _c("constraint-semicolon", "--constraint=a;b"),
    _c("job-name-specials", "--job-name=a|b&c;d,e:f%g"),
    _c("comment-specials", "--comment=x;y&z|w"),
    _c("output-pattern", "--output=%x-%j-%N.out"),
    _c("output-none", "--output=none"),
    _c("error-none", "--error=NONE"),
    _c("output-percent-percent", "--output=100%%.out"),
    _c("array-step-limit", "--array=0-7:2%2"),
    _c("array-list", "--array=1,3,5"),
    _c("array-bad", "--array=x"),
    _c("export-list", "--export=A=1,B=2"),
    _c("gres-typed", "--gres=gpu:a100:3,tmp:1"),
    _c("gpus-typed", "--gpus=a100:4"),
    _c("gpus-per-node-typed", "--gpus-per-node=h100:8"),
    _c("gpus-per-task-typed", "--gpus-per-task=v100:1"),
    _c("partition-list", "--partition=debug,gpu"),
    _c("partition-missing", "--partition=gpu"),
    # --- time limits: Slurm's grammar ------------------------------------------------------------------------
    *[
        _c(f"time:{value}", f"--time={value}")
        for value in (
            "0", "UNLIMITED", "unlimited", "INFINITE", "Infinite", "-1", "1", "59", "90", "1:30", "0:30", "0:59",
            "1:00:00", "2:3:4", "1-0", "2-12", "1-1:30", "1-1:30:15", "0-0", "0-0:0:1", "00:00:00", "1-",
            "100000", "35791393", "1::", ":5", "5:", "1:2:3:4", "1-2-3", "1:2-3", "-0", "-00", "abc", "1h", "1.5",
            " 5", "5 ", "+5", "1-:30", "²", "١٢", "1e3", "NONE",
        )
    ],
    _c("time:empty", "--time="),
    _c("time:negative-days", "--time=-5", intended=NEGATIVE, intended_verdict=False),
    _c("time:minutes-round-overflow", "--time=35791394", intended=OVERFLOW, intended_verdict=False),
    _c("time:5000-digits", "--time=" + "9" * 5000, intended=OVERFLOW, intended_verdict=False),
    _c("time:int-overflow", "--time=99999999999", intended=OVERFLOW, intended_verdict=False),
    _c("time:seconds-overflow", "--time=35791395", intended=OVERFLOW, intended_verdict=False),
    _c("time-min:unicode", "--time-min=²"),
    # --- counts ---------------------------------------------------------------------------------------------
    *[
        _c(f"nodes:{value}", f"--nodes={value}")
        for value in ("1", "0", "1-1", "1-2", "2-1", "-1", "1-", "abc", "1k", " 1", "1x", "²", "+1")
    ],
    *[_c(f"ntasks:{value}", f"--ntasks={value}") for value in ("1", "0", "-1", "abc", "2x", "+2", " 2", "²", "3")],
    _c("ntasks:5000-digits", "--ntasks=" + "9" * 5000),
    _c("ntasks:int-wrap", "--ntasks=4294967297", intended=OVERFLOW, intended_verdict=False),
    *[_c(f"ntasks-per-node:{value}", f"--ntasks-per-node={value}") for value in ("0", "-2", "x", "1")],
    _c("nodes-and-ntasks", "-N", "1", "-n", "2"),
    _c("cpus-per-task:bad", "--cpus-per-task=x"),
    _c("mem:bad", "--mem=lots", intended=SBATCH_CHECKS_IT, intended_verdict=True),
    _c("mail-type:bad", "--mail-type=BOGUS", intended=SBATCH_CHECKS_IT, intended_verdict=True),
    _c("signal:bad", "--signal=NOSUCH", intended=SBATCH_CHECKS_IT, intended_verdict=True),
    _c("begin:bad", "--begin=notatime", intended=SBATCH_CHECKS_IT, intended_verdict=True),
    _c("dependency:bad", "--dependency=bogus"),
    _c("open-mode:bad", "--open-mode=sideways", intended=SBATCH_CHECKS_IT, intended_verdict=True),
    _c("distribution:bad", "--distribution=random", intended=SBATCH_CHECKS_IT, intended_verdict=True),
    _c("exclusive:bad", "--exclusive=nobody", intended=SBATCH_CHECKS_IT, intended_verdict=True),
    _c("gres:help-like", "--gres=gpu:x:y:z"),
    # --- hetjob on the command line ------------------------------------------------------------------------
    _c("het-cli", "-t", "5", ":", "-t", "10", het=True),
    _c("het-cli-name", "-J", "first", ":", "-J", "second", het=True),
    _c("het-cli-trailing", "-t", "5", ":", het=True),
]

SCRIPT_CASES: list[Case] = [
    _d("dir:basic", "#SBATCH --time=15", "#SBATCH -J scripted", "#SBATCH -p debug"),
    _d("dir:after-command", "echo hi", "#SBATCH --time=15"),
    _d("dir:after-assignment", "X=1", "#SBATCH --time=15"),
    _d("dir:after-set-e", "set -e", "#SBATCH --time=15"),
    _d("dir:indented", "  #SBATCH --time=15"),
    _d("dir:indented-then-real", "  #SBATCH --time=15", "#SBATCH --time=25"),
    _d("dir:tab-indented", "\t#SBATCH --time=15"),
    _d("dir:blank-and-comments", "", "# a comment", "", "#SBATCH --time=15", "   ", "#SBATCH -J after-blank"),
    _d("dir:no-space", "#SBATCH--time=15"),
    _d("dir:tab", "#SBATCH\t--time=15"),
    _d("dir:empty", "#SBATCH", "#SBATCH --time=15"),
    _d("dir:empty-spaces", "#SBATCH   ", "#SBATCH --time=15"),
    _d("dir:trailing-comment", "#SBATCH --time=15 # fifteen minutes"),
    _d("dir:hash-in-value", "#SBATCH --job-name=a#b"),
    _d("dir:quoted-hash", "#SBATCH --job-name='a#b'"),
    _d("dir:single-quotes", "#SBATCH --job-name='a b'"),
    _d("dir:double-quotes", '#SBATCH --job-name="a b"'),
    _d("dir:mid-quotes", '#SBATCH --job-name=x"a b"y'),
    _d("dir:backslash-space", "#SBATCH --job-name=a\\ b"),
    _d("dir:backslash-in-quotes", '#SBATCH --job-name="a\\"b"'),
    _d("dir:trailing-backslash", "#SBATCH --job-name=abc\\", "#SBATCH --time=15"),
    _d("dir:unmatched-quote", "#SBATCH --job-name='abc"),
    _d("dir:two-options", "#SBATCH -N1 -n2"),
    _d("dir:space-value", "#SBATCH -t 15"),
    _d("dir:value-next-line", "#SBATCH -t", "#SBATCH 15"),
    _d("dir:not-an-option", "#SBATCH foo"),
    _d("dir:extra-word", "#SBATCH --time=15 extra"),
    _d("dir:colon", "#SBATCH : -N1"),
    _d("dir:colon-later", "#SBATCH -N1 :"),
    _d("dir:double-dash", "#SBATCH --", "#SBATCH --time=15"),
    _d("dir:double-dash-then-option", "#SBATCH -- --time=15"),
    _d("dir:lowercase", "#sbatch --time=15"),
    _d("dir:space-after-hash", "# SBATCH --time=15"),
    _d("dir:double-hash", "##SBATCH --time=15"),
    _d("dir:suffix-word", "#SBATCHX"),
    _d("dir:slurm-magic", "#SLURM --time=15"),
    _d("dir:wrap-inside", "#SBATCH --wrap=hostname", "#SBATCH --time=15"),
    _d("dir:help-inside", "#SBATCH --help", "#SBATCH --time=15"),
    _d("dir:verbose-inside", "#SBATCH -v"),
    _d("dir:quiet-inside", "#SBATCH -Q"),
    _d("dir:unknown-option", "#SBATCH --bogus=1", intended=UNKNOWN_PASSES, intended_verdict=True),
    _d("dir:bad-time", "#SBATCH --time=soon"),
    _d("dir:last-wins", "#SBATCH --time=15", "#SBATCH --time=25"),
    _d("dir:constraint-or", "#SBATCH --constraint=a100|h100"),
    _d("dir:constraint-and", "#SBATCH --constraint=a100&ib"),
    _d("dir:semicolon", "#SBATCH --job-name=a;b"),
    _d("dir:comma-colon-percent", "#SBATCH --output=%x,%j:%a.out"),
    _d("dir:pipe-in-name", "#SBATCH -J x|y"),
    _d("dir:abbreviation", "#SBATCH --par=debug", "#SBATCH --ti=15"),
    _d("dir:ambiguous", "#SBATCH --nod=1"),
    _d("dir:alias-cluster", "#SBATCH --cluster=dev"),
    _d("dir:alias-tasks-per-node", "#SBATCH --tasks-per-node 2"),
    _d("dir:bundle", "#SBATCH -HJbundle"),
    _d("dir:gpus", "#SBATCH --gpus-per-node=4"),
    _d("dir:gres", "#SBATCH --gres=gpu:a100:2"),
    _d("dir:array", "#SBATCH --array=0-9%3"),
    _d("dir:output-error", "#SBATCH -o logs/%x-%j.out", "#SBATCH -e logs/%x-%j.err"),
    _d("dir:hetjob", "#SBATCH --time=15", "#SBATCH hetjob", "#SBATCH --time=25", het=True),
    _d("dir:hetjob-upper", "#SBATCH --time=15", "#SBATCH HETJOB", "#SBATCH --time=25", het=True),
    _d("dir:packjob", "#SBATCH --time=15", "#SBATCH packjob", "#SBATCH --time=25", het=True),
    _d("dir:hetjob-with-options", "#SBATCH --time=15", "#SBATCH hetjob --time=25", het=True),
    _d("dir:hetjob-mid-line", "#SBATCH --time=15 hetjob", "#SBATCH -J after"),
    _d("dir:hetjobs-word", "#SBATCH hetjobs"),
    _d("dir:hetjob-mid-line-drops-rest", "#SBATCH --time=15 hetjob -J dropped"),
    _d("dir:empty-quotes-end-line", "#SBATCH '' -J dropped", "#SBATCH --time=15"),
    _d("dir:missing-value-last", "#SBATCH --time=15", "#SBATCH -t"),
    _d("dir:quoted-spaces-time", '#SBATCH --time=" 15"'),
    _d("dir:slurm-and-sbatch", "#SLURM --time=15", "#SBATCH -J both"),
    _d("dir:cr-in-value", "#SBATCH -J cr\rname"),
    _d("dir:heredoc-after-command", "cat <<EOF", "#SBATCH --time=15", "EOF"),
    _d("dir:shebang-only-then-directive", "#SBATCH -t 1-0"),
    _d("dir:time-zero", "#SBATCH --time=0"),
    _d("dir:time-days", "#SBATCH --time=2-00:00:00"),
    _d("dir:time-unlimited", "#SBATCH --time=UNLIMITED"),
    _d("dir:cli-overrides", "#SBATCH --time=15", "#SBATCH -J fromscript"),
    _d("dir:exclusive-optional", "#SBATCH --exclusive", "#SBATCH --time=15"),
    _d("dir:nice-optional-space", "#SBATCH --nice 5"),
    Case("dir:cli-overrides-script", ("--time=30", "-J", "fromcli"), ("#SBATCH --time=15", "#SBATCH -J fromscript")),
    # --- whole-script rules ---------------------------------------------------------------------------------
    Case("script:dos", script="#!/bin/bash\r\n#SBATCH --time=15\r\nhostname\r\n"),
    Case("script:dos-one-line", script="#!/bin/bash\n#SBATCH --time=15\r\nhostname\n"),
    Case("script:cr-only", script="#!/bin/bash\n#SBATCH --time=15\rhostname\n"),
    Case("script:no-shebang", script="#SBATCH --time=15\nhostname\n"),
    Case("script:space-before-shebang", script=" #!/bin/bash\nhostname\n"),
    Case("script:empty", script=""),
    Case("script:whitespace", script="  \n\n"),
    Case("script:nul", script="#!/bin/bash\nhostname\x00\n"),
    Case("script:no-trailing-newline", script="#!/bin/bash\n#SBATCH --time=15"),
    Case("script:shebang-sh", script="#!/bin/sh\n#SBATCH -J sh\nhostname\n"),
    Case("script:directive-line-1-after-shebang-space", script="#! /bin/bash\n#SBATCH --time=15\nhostname\n"),
    Case("script:missing-file", ("/nonexistent/job.sh",), no_script=True),
]

ENV_CASES: list[Case] = [
    Case("env:timelimit", env={"SBATCH_TIMELIMIT": "40"}),
    Case("env:timelimit-over-script", directives=("#SBATCH --time=15",), env={"SBATCH_TIMELIMIT": "40"}),
    Case("env:cli-over-timelimit", ("--time=20",), env={"SBATCH_TIMELIMIT": "40"}),
    Case("env:timelimit-empty", env={"SBATCH_TIMELIMIT": ""}),
    Case("env:timelimit-bad", env={"SBATCH_TIMELIMIT": "soon"}),
    Case("env:timelimit-bad-overridden", ("--time=20",), env={"SBATCH_TIMELIMIT": "soon"}),
    Case("env:partition", env={"SBATCH_PARTITION": "debug"}),
    Case("env:partition-empty", env={"SBATCH_PARTITION": ""}),
    Case("env:job-name", env={"SBATCH_JOB_NAME": "from-env"}),
    Case("env:job-name-empty", env={"SBATCH_JOB_NAME": ""}),
    Case("env:output", env={"SBATCH_OUTPUT": "env-%j.out"}),
    Case("env:error", env={"SBATCH_ERROR": "env-%j.err"}),
    Case("env:constraint", env={"SBATCH_CONSTRAINT": "a|b"}),
    Case("env:array", env={"SBATCH_ARRAY_INX": "1-2"}),
    Case("env:gpus-per-node", env={"SBATCH_GPUS_PER_NODE": "2"}),
    Case("env:gpus", env={"SBATCH_GPUS": "4"}),
    Case("env:gres", env={"SBATCH_GRES": "gpu:1"}),
    Case("env:gpus-per-task", env={"SBATCH_GPUS_PER_TASK": "1"}),
    Case("env:gpus-per-socket", env={"SBATCH_GPUS_PER_SOCKET": "1"}),
    Case("env:clusters", env={"SBATCH_CLUSTERS": "dev"}),
    Case("env:slurm-clusters", env={"SLURM_CLUSTERS": "dev"}),
    Case("env:exclusive-empty", env={"SBATCH_EXCLUSIVE": ""}),
    Case("env:exclusive-user", env={"SBATCH_EXCLUSIVE": "user"}),
    Case("env:requeue-yes", env={"SBATCH_REQUEUE": "yes"}),
    Case("env:requeue-no-resets-script", directives=("#SBATCH --requeue",), env={"SBATCH_REQUEUE": "no"}),
    Case("env:overcommit-1", env={"SBATCH_OVERCOMMIT": "1"}),
    Case("env:debug", env={"SBATCH_DEBUG": "1"}),
    Case("env:no-kill", env={"SBATCH_NO_KILL": ""}),
    Case("env:cpu-freq", env={"SBATCH_CPU_FREQ_REQ": "high"}),
    Case("env:cluster-constraint", env={"SBATCH_CLUSTER_CONSTRAINT": "x"}),
    Case("env:burst-buffer", env={"SBATCH_BURST_BUFFER": "x"}),
    Case("env:mem-per-node", env={"SBATCH_MEM_PER_NODE": "100M"}),
    Case("env:mem-bad", env={"SBATCH_MEM_PER_NODE": "lots"}, intended=SBATCH_CHECKS_IT, intended_verdict=True),
    Case("env:hint-both", env={"SLURM_HINT": "multithread", "SBATCH_HINT": "nomultithread"}),
    Case("env:ignore-pbs", env={"SBATCH_IGNORE_PBS": "1"}),
    Case("env:unknown-var-ignored", env={"SBATCH_NOT_AN_OPTION": "x"}),
    Case("env:srun-var-ignored", env={"SLURM_TIMELIMIT": "5"}),
    Case("env:wrap-var-ignored", env={"SBATCH_WRAP": "x"}),
    Case("env:timelimit-unicode", env={"SBATCH_TIMELIMIT": "²"}),
    Case("env:nodes-not-an-input", env={"SBATCH_NODES": "2"}),
    Case("env:debug-with-quiet", ("-Q",), env={"SBATCH_DEBUG": "1"}, verbose=False),
    Case("env:debug-zero-with-quiet", ("-Q",), env={"SBATCH_DEBUG": "0"}, verbose=False),
    Case("env:requeue-number", env={"SBATCH_REQUEUE": "2"}),
    Case("env:exclusive-bad", env={"SBATCH_EXCLUSIVE": "nobody"}, intended=SBATCH_CHECKS_IT, intended_verdict=True),
    Case("env:nodes-via-cli-over-script", ("-N", "1"), ("#SBATCH -N 1-1",), env={"SBATCH_TIMELIMIT": "1-"}),
]

CASES: list[Case] = _option_cases() + SPECIAL_CASES + SCRIPT_CASES + ENV_CASES
