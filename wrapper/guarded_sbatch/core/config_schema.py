"""Every configuration key, declared once: its TOML path, kind, default, bounds, the site's example value and its
documentation. From this table follow the defaults, the known keys, each value's check and its one-line error
(core/config_key.py: what a `Key` is and how a value is checked against it), the site-only keys, and
site_configs/example-site.toml (written by core/config_example.py; a test keeps the two equal).
core/config.py turns checked values into the immutable settings the rest of the code reads.
"""

from __future__ import annotations

import json
from typing import Any

from guarded_sbatch.core.check_names import CHECK_NAMES
from guarded_sbatch.core.config_key import Key

NOTIFY_EVENTS = ("stop", "wait_long", "crash", "sidecar_error", "unguarded")
LAUNCHER_KINDS = ("python", "torchrun", "accelerate", "deepspeed")  # the kinds sbatch/launcher.py recognises
DEFAULT_FORBIDDEN_NAMES: tuple[str, ...] = (
    r"(run|wave|phase|exp|try|trial|job|attempt|v)[-_]?\d+",
    r"test\d*",
    r"tmp\d*",
    r"temp\d*",
    r"debug\d*",
    r"foo|bar|baz|asdf|untitled|default|new|final|latest",
    r"[a-z]{1,3}-[a-z]{1,3}",  # initials like cs-ad
    r".*-internal",
)
DEFAULT_NAME_PATTERN = r"[a-z0-9][a-z0-9.]*(-[a-z0-9][a-z0-9.]*){2,}"

_WAIT_DOC = (
    "Which events: stop (the sidecar stopped a run; the plot is attached where the service takes files),\n"
    "wait_long (WAIT for wait_long_minutes in a row), crash (the job ended FAILED / OUT_OF_MEMORY / NODE_FAIL /\n"
    "TIMEOUT), sidecar_error (the sidecar itself failed: the run is no longer watched), unguarded (a running job\n"
    "with no judged loss after sidecar.unguarded_after_seconds: the guard cannot read it; once per run)."
)

SCHEMA: tuple[Key, ...] = (
    Key(
        "locked",
        "str_list",
        [],
        "Dotted keys users may not change. Only the site config may hold `locked`. A user config that sets one of\n"
        "these to a different value is refused with one line naming the key (equal values are accepted).\n"
        "Site-only keys (locked, enabled, audit, enforcement) are refused in a user config whatever their value.",
        site_only=True,
        example=["checks.mandatory", "name_pattern", "run_roots", "quiet_hours"],
    ),
    Key(
        "enabled",
        "bool",
        True,
        "The site switch-off: false hands every job the `sbatch` shim sees to Slurm's sbatch untouched, and the\n"
        'rendered plugin policy becomes unguarded_training = "allow" (render it again after changing this).\n'
        "The `guarded-sbatch` command itself keeps working for those who call it. Site config only.",
        site_only=True,
    ),
    Key(
        "scheduler",
        "str",
        "auto",
        'Where jobs go: "slurm", "local" (plain processes), or "auto" (slurm when `sbatch --version` answers); any\n'
        "backend of the registry (scheduler/__init__.py, which checks the name when a launch picks it).",
    ),
    Key(
        "job_umask",
        "choice",
        "",
        "The umask every guarded job starts with (its training job and its guard; sbatch passes the launching\n"
        "process's umask on). Empty: the user's own. Where users work with umask 002 in shared project folders,\n"
        '"022" keeps co-workers from writing a run\'s logs and event files, so the sidecar may STOP on them\n'
        "(a file others can write never decides a STOP alone: docs/threat-model.md).",
        choices=("", "022", "027", "077"),
    ),
    Key(
        "check_interval_minutes",
        "float",
        30.0,
        "Minutes between the sidecar's full reports (it checks hard faults more often).",
        example=30,
        flag="--full-interval",
    ),
    Key(
        "notes",
        "path",
        "",
        "The project notes file every STOP appends a note to (relative: to the folder you submit from); --guard-notes\n"
        "wins. Empty: no notes file (the pre-flight says so).",
        sample="NOTES.md",
    ),
    Key(
        "run_roots",
        "path_list",
        [],
        "Folders that hold run outputs. A run named NAME collides when <root>/NAME exists (unless a restart),\n"
        "and cleanup (kill / restart) only ever deletes inside these. $VAR and ~ are expanded, never by a shell.",
        example=["/scratch/$USER/runs", "~/runs"],
    ),
    Key(
        "template_dirs",
        "path_list",
        [],
        "Extra folders searched for sbatch templates (sidecar.sbatch ...) before the built-in ones.",
        example=["/opt/site/guarded-sbatch/templates"],
    ),
    Key(
        "name_pattern",
        "regex",
        DEFAULT_NAME_PATTERN,
        "Run names must match this regular expression in full: <dataset/task>-<model>-<key-config>-<recipe-piece>.",
    ),
    Key(
        "forbidden_names",
        "regex_list",
        list(DEFAULT_FORBIDDEN_NAMES),
        "Names refused even when they match the pattern (regular expressions, matched in full, any case).",
    ),
    Key(
        "quiet_hours",
        "quiet_hours",
        [],
        'When a run should not end (the ETA check warns): "HH:MM-HH:MM" every day, or with weekdays first\n'
        '("Mon-Fri 12:00-13:00", "Sat,Sun 00:00-24:00"). A window may cross midnight.',
        example=["22:00-07:00", "Sat,Sun 00:00-24:00"],
    ),
    Key(
        "notify.urls",
        "str_list",
        [],
        "Alerts through apprise (https://github.com/caronc/apprise/wiki): one URL per service, e.g.\n"
        '  "slack://TokenA/TokenB/TokenC/#ml-alerts", "msteams://...", "matrixs://user:pass@host/#room",\n'
        '  "mailtos://user:pass@smtp.example.org?to=ml-team@example.org", "ntfys://ntfy.sh/my-topic",\n'
        '  "json://hooks.example.org/guarded-sbatch" (a plain JSON POST).\n'
        "URLs hold secrets: guarded-sbatch never prints, logs or writes them; keep this file readable only by those\n"
        "who need it. Site URLs and a user's own ([notify] in ~/.config/guarded-sbatch/config.toml) both get alerts.",
    ),
    Key("notify.on", "names", list(NOTIFY_EVENTS), _WAIT_DOC, choices=NOTIFY_EVENTS),
    Key("notify.wait_long_minutes", "float", 60.0, "", example=60),
    Key(
        "audit.log",
        "path",
        "",
        "The admins' record: one JSON line per launch, waiver, STOP, kill, restart and shim bypass (user, job, run,\n"
        "check, reason). Appends are locked (flock) and whole lines. Users must be able to append, so to keep them\n"
        "from editing it put it in a root-owned folder they cannot write to and use syslog as the record of truth:\n"
        "with syslog = true every line also goes to `logger -t guarded-sbatch -p user.notice` (the system journal).\n"
        "Site config only. Empty log: no file.",
        site_only=True,
    ),
    Key("audit.syslog", "bool", False, "", site_only=True),
    Key(
        "checks.mandatory",
        "names",
        [],
        f"The pre-flight checks: {', '.join(CHECK_NAMES)}. A failed check blocks the launch.\n"
        "Checks that cannot be waived with --guard-waive at this site.",
        choices=CHECK_NAMES,
        example=["paths", "run-name"],
    ),
    Key(
        "checks.waivable",
        "names",
        list(CHECK_NAMES),
        "Checks a user may waive (with a reason, recorded with the run). Mandatory ones are never waivable.",
        choices=CHECK_NAMES,
        example=["config-diff", "monitoring", "eta"],
    ),
    Key(
        "sidecar.partition",
        "str",
        "",
        "Where the sidecar job runs: 1 CPU, little memory, no GPU. Empty strings leave the option out.",
        example="cpu",
    ),
    Key("sidecar.account", "str", "", ""),
    Key("sidecar.qos", "str", "", "", example="sidecar"),
    Key("sidecar.cpus", "int", 1, "", high=1024),
    Key("sidecar.mem", "str", "1G", ""),
    Key("sidecar.time", "str", "", "", note="empty: the sidecar ends with the training job"),
    Key("sidecar.template", "str", "sidecar.sbatch", "", note="looked up in template_dirs, then the built-in templates"),
    Key("sidecar.fast_interval_seconds", "float", 10.0, "", example=10, flag="--fast-interval",
        note="how often the sidecar reads new metric points (new bytes of local files: cheap; the scheduler is asked "
             "on its own cadence)"),
    Key(
        "sidecar.job_poll_seconds",
        "float",
        300.0,
        "",
        example=300,
        flag="--job-poll",
        note="how often it may ask the scheduler about the job (Slurm < 23.02 has no RPC limits)",
    ),
    Key("sidecar.unguarded_after_seconds", "float", 180.0, "", example=180,
        note="a running job with no judged loss this long after it started is UNGUARDED: shown, alerted once"),
    Key("sidecar.kill_grace_seconds", "float", 3.0, "", high=3600,
        note="a STOP sends TERM to the job's steps, then KILL after this grace, then cancels the job"),
    Key("sidecar.evidence_plot", "bool", True, "", example=True,
        note="a STOP's evidence includes metrics.png (drawn by matplotlib in a short child process, about a second "
             "of CPU); false keeps the data only (`show RUN --png FILE` draws it later)"),
    Key(
        "sidecar.mode",
        "choice",
        "per-job",
        "per-job: a sidecar job per run; per-user: one shared monitor job watches all of a user's runs\n"
        "(it requeues itself before its time limit and adopts the runs of its predecessor).",
        choices=("per-job", "per-user"),
    ),
    Key("sidecar.max_runs_per_monitor", "int", 200, "", note="a per-user monitor watching this many runs starts another"),
    Key("sidecar.monitor_time", "str", "", "", note="the shared monitor's --time; it requeues itself before the limit"),
    Key("sidecar.monitor_mem", "str", "2G", ""),
    Key(
        "launcher.signal_margin_seconds",
        "int",
        300,
        "Jobs built from a launcher command (`guarded-sbatch [sbatch options] torchrun train.py ...`) ask Slurm for\n"
        "USR1 this many seconds before the time limit (#SBATCH --signal=B:USR1@N; Slurm may send it up to ~30 s\n"
        "earlier), pass it to the trainer so it checkpoints, and requeue themselves up to max_requeues times\n"
        "(counted by SLURM_RESTART_COUNT). Past that count the trainer is not signalled and runs on to the limit.\n"
        "Users override both per launch with --guard-signal-margin / --guard-max-requeues.",
    ),
    Key("launcher.max_requeues", "int", 3, "", low=0, low_inclusive=True),
    Key(
        "preflight.reference_dirs",
        "str_list",
        ["configs", "recipes", "experiments"],
        "No longer read (kept so that older configs load): the reference is chosen among your guarded runs that\n"
        "finished healthy, or named (--guard-reference, `guarded-sbatch reference RUN`), never found among files.",
    ),
    Key("preflight.reference_max_depth", "int", 3, "", note="No longer read (see reference_dirs)."),
    Key("preflight.reference_max_age_days", "float", 30.0, "", example=30,
        note="How recent a finished healthy run must be (submitted in the last N days) to be chosen as the reference."),
    Key(
        "preflight.stat_timeout_seconds",
        "float",
        5.0,
        "",
        example=5,
        note="every stat on the login node gives up after this (hung network mounts)",
    ),
    Key(
        "preflight.max_workers_on_network_fs",
        "int",
        4,
        "",
        note="more dataloader workers than this on NFS/Lustre/GPFS/... fails config-diff",
    ),
    Key(
        "enforcement.unguarded_training",
        "choice",
        "tag",
        "Site policy for training jobs that did NOT go through guarded-sbatch's pre-flight. Read by the sbatch shim\n"
        "(modulefiles/) and, rendered to Lua, by Slurm's plugins (guarded_sbatch/site/lua/cli_filter.lua, job_submit.lua):\n"
        "  guarded-sbatch admin render-policy /etc/guarded-sbatch/site.toml /etc/slurm/guarded_sbatch_policy.lua\n"
        "A guarded submission is recognised by its marker: guarded-sbatch adds `--comment=... guarded-sbatch:preflight=\n"
        "<Adler-32 of the script>` (the sidecar: `guarded-sbatch:sidecar=...`), which the plugins recompute.\n"
        '  "reject": job_submit refuses the job; sbatch prints how to submit it (module load guarded-sbatch; ...)\n'
        '  "tag":    the job runs, tagged in admin_comment (or comment, see tag_field); sbatch prints a note\n'
        '  "allow":  the plugins let everything through (the shim still pre-flights training jobs)',
        choices=("reject", "tag", "allow"),
        site_only=True,
        example="reject",
    ),
    Key(
        "enforcement.launchers",
        "names",
        list(LAUNCHER_KINDS),
        "What counts as a training job: a launcher line of one of these kinds (python <script or -m module>,\n"
        "torchrun, accelerate launch, deepspeed; also behind srun / exec / env VAR=x / time / nohup) ...",
        choices=LAUNCHER_KINDS,
        site_only=True,
    ),
    Key(
        "enforcement.training_commands",
        "str_list",
        [],
        "... or a command line containing one of these plain substrings (the site's own launchers).",
        site_only=True,
        nonempty=True,
        example=["run_pretrain.sh"],
    ),
    Key(
        "enforcement.exempt_programs",
        "str_list",
        ["guarded_sbatch", "submitit.core._submit", "pip"],
        "Programs or modules that are never training (an entry matches the program, its basename, or a module and\n"
        "its submodules): guarded-sbatch's own sidecar, plain submitit jobs (remove it to require GuardedExecutor\n"
        "once it marks its jobs), pip.",
        site_only=True,
        nonempty=True,
    ),
    Key(
        "enforcement.tag",
        "str",
        "guarded-sbatch:unguarded",
        'The tag written for policy "tag", and where: "admin_comment" (users cannot change it) or "comment".',
        site_only=True,
        nonempty=True,
    ),
    Key("enforcement.tag_field", "choice", "admin_comment", "", choices=("admin_comment", "comment"), site_only=True),
    Key(
        "judge",
        "table",
        {},
        "The judge's thresholds by name (every field of judge/policy.py's JudgePolicy; docs/judge.md lists them with\n"
        "their defaults and ranges, checked when the run is judged). Empty: the built-in ones.",
    ),
)
KEYS: dict[str, Key] = {key.path: key for key in SCHEMA}
# Tables whose names their reader checks (the judge's thresholds: judge/table.py)
OPEN_TABLES = tuple(key.path for key in SCHEMA if key.kind == "table")


def defaults() -> dict[str, Any]:
    """The built-in values as nested tables, as a TOML file would give them."""
    tree: dict[str, Any] = {}
    for key in SCHEMA:
        *tables, name = key.path.split(".")
        node = tree
        for table in tables:
            node = node.setdefault(table, {})
        node[name] = json.loads(json.dumps(key.default))  # a fresh copy
    return tree

