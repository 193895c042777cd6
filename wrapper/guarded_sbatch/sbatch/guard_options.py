"""guarded-sbatch's own options (`--guard-*`), declared once in GUARD_TABLE.

One row per option: its flag, whether it takes a value (a metavar), whether it repeats, its one line of help, the
GuardOptions field it fills and how its text is checked, the GuardedExecutor keyword that stands for it, and how
`restart` replays it. From the table follow the parser (sbatch/argv.py), both usage texts (`guarded-sbatch
--help`, `guarded-sbatch run --help`), the executor's keywords (launch/executor.py) and restart's replay
(cli/kill_restart.py). Every reader asks the table when it runs (`guard_table()`), never a copy made at import.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guarded_sbatch.core.check_names import CHECK_NAMES
from guarded_sbatch.core.errors import UsageError
from guarded_sbatch.core.suggest import closest, did_you_mean
from guarded_sbatch.core.waiting import hanging


@dataclass(frozen=True)
class Waiver:
    check: str
    reason: str

    def to_json(self) -> dict[str, str]:
        return {"check": self.check, "reason": self.reason}


@dataclass(frozen=True)
class GuardOptions:
    """The parsed guard options: one field per row of GUARD_TABLE (its `field`), typed here."""

    waivers: tuple[Waiver, ...] = ()
    reference: Path | None = None
    config: Path | None = None
    run_name: str | None = None
    seconds_per_epoch: float | None = None
    epochs: int | None = None
    restart: bool = False
    json: bool = False
    tb: tuple[Path, ...] = ()
    wandb: tuple[Path, ...] = ()
    log: tuple[Path, ...] = ()
    stop_command: str | None = None
    notes: Path | None = None
    backend: str | None = None
    checkpoint_dir: Path | None = None
    artifact_dir: Path | None = None
    print_script: bool = False
    signal_margin_s: int | None = None
    max_requeues: int | None = None
    monitor: str | None = None  # per-job | per-user; None: the config's [sidecar] mode
    loss_key: str | None = None  # the series judged as the training loss (the run record's [judge] train_loss_key)


@dataclass(frozen=True)
class GuardOption:
    """One guard option. `kind` says how its text is checked and what its field holds: flag (True when given), text,
    path, positive_float, positive_int, count (a whole number ≥ 0), choice (one of `choices`), waiver (CHECK=REASON).
    `replay`: how `restart` gives it again — "given" (the words the launch was given, from the run's record),
    "record:ATTR" (the run record's ATTR: what the launch settled on), "never" (not a setting of the run)."""

    flag: str
    field: str
    kind: str
    help: str
    metavar: str = ""  # "" for a flag
    repeatable: bool = False
    choices: tuple[str, ...] = ()
    keyword: str = ""  # the GuardedExecutor keyword standing for it; "" when the executor has none
    replay: str = "given"

    @property
    def takes_value(self) -> bool:
        return self.kind != "flag"

    @property
    def is_path(self) -> bool:
        return self.kind == "path"


GUARD_TABLE: tuple[GuardOption, ...] = (
    GuardOption("--guard-waive", "waivers", "waiver", "waive a failed check, with why (recorded)",
                "CHECK=REASON", repeatable=True, keyword="waivers"),
    GuardOption("--guard-reference", "reference", "path", "the reference run's config (or run folder) to diff against",
                "PATH", keyword="reference"),
    GuardOption("--guard-config", "config", "path", "the intended run's config, when the launcher line does not name it",
                "PATH", keyword="config"),
    GuardOption("--guard-run-name", "run_name", "text", "the run name, when --job-name and the config give none",
                "NAME", keyword="run_name", replay="record:run_name"),
    GuardOption("--guard-seconds-per-epoch", "seconds_per_epoch", "positive_float",
                "seconds one epoch takes, for the ETA", "S", keyword="seconds_per_epoch"),
    GuardOption("--guard-epochs", "epochs", "positive_int", "the epochs the run trains, for the ETA", "N",
                keyword="epochs"),
    GuardOption("--guard-restart", "restart", "flag", "a restart: the run's name and output folder may exist",
                keyword="restart", replay="never"),
    GuardOption("--guard-json", "json", "flag", "`check`: also print the report as JSON on stdout (alias --json)",
                replay="never"),
    GuardOption("--guard-tb", "tb", "path", "a TensorBoard folder the sidecar reads (default: the run's own)", "PATH",
                repeatable=True, keyword="tb_dir"),
    GuardOption("--guard-wandb", "wandb", "path", "a W&B run folder or .wandb file the sidecar reads", "PATH",
                repeatable=True, keyword="wandb_dir"),
    GuardOption("--guard-log", "log", "path", "a text log of the run the sidecar reads", "PATH", repeatable=True,
                keyword="log_path"),
    GuardOption("--guard-loss-key", "loss_key", "text", "the logged series the sidecar judges as the training loss, "
                "when it cannot tell (an UNGUARDED run names it)", "KEY", keyword="train_loss_key"),
    GuardOption("--guard-stop-command", "stop_command", "text", "how the sidecar stops the run (default: cancel the job)",
                "CMD", keyword="stop_command"),
    GuardOption("--guard-notes", "notes", "path", "the project notes file the sidecar appends to on STOP", "PATH",
                keyword="notes_path"),
    # the backend's name is checked against the one registry of backends (scheduler/__init__.py) when it is chosen
    GuardOption("--guard-backend", "backend", "text", "where jobs run: a scheduler backend, e.g. slurm or local "
                "(default: the config's scheduler)", "NAME", replay="record:backend"),
    GuardOption("--guard-checkpoint-dir", "checkpoint_dir", "path", "the run's checkpoint folder (kill/restart purge it)",
                "PATH", keyword="checkpoint_dir"),
    GuardOption("--guard-artifact-dir", "artifact_dir", "path", "the run's artifact folder (kill/restart purge it)",
                "PATH", keyword="artifact_dir"),
    GuardOption("--guard-print-script", "print_script", "flag",
                "launcher command: print its batch script, submit nothing (alias --print-script)",
                replay="never"),
    GuardOption("--guard-signal-margin", "signal_margin_s", "positive_int",
                "launcher command: USR1 S seconds before the time limit (checkpoint)", "S"),
    GuardOption("--guard-max-requeues", "max_requeues", "count",
                "launcher command: how often the job requeues itself after checkpointing", "N"),
    GuardOption("--guard-monitor", "monitor", "choice",
                "a sidecar job per run, or one monitor job per user (default: sidecar.mode)",
                "per-job|per-user", choices=("per-job", "per-user"), keyword="monitor"),
)
ALIASES = {"--json": "--guard-json", "--print-script": "--guard-print-script"}  # sbatch 22.05 has neither


def guard_table() -> tuple[GuardOption, ...]:
    """The table as it is now (a test may extend it)."""
    return GUARD_TABLE


def guard_option(flag: str) -> GuardOption | None:
    return next((row for row in guard_table() if row.flag == flag), None)


def guard_flags() -> list[str]:
    return [row.flag for row in guard_table()]


def usage_lines(width: int = 31, columns: int = 80) -> list[str]:
    """The guard options as a usage text lists them: `  --flag METAVAR   help`, the help on its own line when the
    flag is wider than `width`, wrapped under its column to `columns`."""
    lines = []
    for row in guard_table():
        head = f"  {row.flag} {row.metavar}".rstrip()
        text = row.help + (f" (one of: {', '.join(CHECK_NAMES)})" if row.kind == "waiver" else "") + \
            ("; repeatable" if row.repeatable else "")
        lines += hanging(head, text, width, columns).splitlines()
    return lines


def build_guard_options(pairs: Sequence[tuple[str, str | None]]) -> GuardOptions:
    """GuardOptions from (flag, value) pairs in the order given: a single-valued option given twice keeps the last."""
    values: dict[str, Any] = {}
    for flag, text in pairs:
        row = guard_option(flag)
        if row is None:
            raise UsageError(f"unknown option {flag}; {did_you_mean(flag, guard_flags())}")
        value = True if text is None else convert(row, text)
        if row.repeatable:
            values[row.field] = (*values.get(row.field, ()), value)
        else:
            values[row.field] = value
    return GuardOptions(**values)


def convert(row: GuardOption, text: str) -> Any:
    """The value of `row` given as `text`, or one line saying what it must be."""
    if row.kind == "flag":
        raise UsageError(f"{row.flag} takes no value: remove '={text}'")
    if row.kind == "text":
        return text
    if row.kind == "path":
        return Path(text)
    if row.kind == "choice":
        if text not in row.choices:
            raise UsageError(f"{row.flag} must be {' or '.join(row.choices)}, not {text!r}")
        return text
    if row.kind == "waiver":
        return _waiver(text)
    if row.kind == "count":
        if not (text.isascii() and text.isdigit() and len(text) <= 12):
            raise UsageError(f"{row.flag} needs a whole number ≥ 0, got {text!r}")
        return int(text)
    return _positive(row, text)


def _positive(row: GuardOption, text: str) -> int | float:
    kind: type[int] | type[float] = int if row.kind == "positive_int" else float
    try:
        number = kind(text)
    except ValueError:
        raise UsageError(f"{row.flag} needs a positive {kind.__name__}, got {text!r}") from None
    if not number > 0 or number != number or number == float("inf"):
        raise UsageError(f"{row.flag} needs a positive {kind.__name__}, got {text!r}")
    return number


def _waiver(text: str) -> Waiver:
    check, has_reason, reason = text.partition("=")
    check = check.strip()
    reason = reason.strip().strip("\"'").strip()
    if check not in CHECK_NAMES:
        raise UsageError(f"--guard-waive names an unknown check {check!r}; {did_you_mean(check, CHECK_NAMES)}"
                         f"the checks are {', '.join(CHECK_NAMES)}")
    if not has_reason or not reason:
        raise UsageError(f'--guard-waive {check} needs a reason: --guard-waive {check}="why it is safe to skip"')
    return Waiver(check, reason)


def take_guard_option(argv: Sequence[str], index: int, out: list[tuple[str, str | None]]) -> int:
    """Read the guard option at argv[index] (its value attached or the next word) into `out`; the next index."""
    word = argv[index]
    if word in ALIASES:
        out.append((ALIASES[word], None))
        return index + 1
    name, has_value, attached = word.partition("=")
    row = guard_option(name)
    if row is None:
        raise UsageError(f"unknown option {name}; {did_you_mean(name, guard_flags())}"
                         f"guarded-sbatch's own options are {', '.join(guard_flags())}")
    if not row.takes_value:
        if has_value:
            raise UsageError(f"{name} takes no value: remove '={attached}'")
        out.append((name, None))
        return index + 1
    if has_value:
        out.append((name, attached))
        return index + 1
    if index + 1 >= len(argv):
        raise UsageError(f"{name} needs a value, e.g. {name}=VALUE")
    out.append((name, argv[index + 1]))
    return index + 2


def guard_pairs(words: Sequence[str]) -> list[tuple[str, str | None]]:
    """(flag, value) of each guard option in `words`, which hold guard options only."""
    pairs: list[tuple[str, str | None]] = []
    index = 0
    while index < len(words):
        index = take_guard_option(words, index, pairs)
    return pairs


def keyword_words(given: Mapping[str, Any], cwd: Path) -> list[str]:
    """The guard option words that executor keywords stand for (`tb_dir="runs/x"` -> `--guard-tb=<cwd>/runs/x`); a
    path is made absolute against `cwd`, a repeatable option takes one value or a list, `waivers` a mapping."""
    words: list[str] = []
    for row in guard_table():
        value = given.get(row.keyword) if row.keyword else None
        if value is None or value is False or value == "":
            continue
        if row.kind == "flag":
            words.append(row.flag)
            continue
        items: Iterable[Any] = value.items() if isinstance(value, Mapping) else (
            value if row.repeatable and isinstance(value, (list, tuple)) else [value])
        for item in items:
            text = "=".join(map(str, item)) if isinstance(item, tuple) else str(_absolute(item, cwd) if row.is_path else item)
            words.append(f"{row.flag}={text}")
    return words


def executor_keywords() -> dict[str, GuardOption]:
    return {row.keyword: row for row in guard_table() if row.keyword}


def take_keywords(kwargs: dict[str, Any]) -> dict[str, Any]:
    """GuardedExecutor's guard keywords, taken out of `kwargs` (what is left is submitit's); a near miss of one
    (`tb_dri=`) is one line naming it, not an error of submitit's about an unknown executor."""
    keywords = executor_keywords()
    guard = {name: kwargs.pop(name) for name in list(kwargs) if name in keywords}
    for name in kwargs:
        near = closest(name, keywords, cutoff=0.8)
        if near is not None:
            raise UsageError(f"GuardedExecutor has no keyword {name}=: did you mean {near}=? its guard keywords are "
                             f"{', '.join(keywords)}")
    return guard


def _absolute(path: Any, cwd: Path) -> Path:
    candidate = Path(path).expanduser()
    return candidate if candidate.is_absolute() else cwd / candidate


def replay_words(recorded: Sequence[str], given: Sequence[str], record: Any) -> list[str]:
    """The guard words `restart` launches with: each option of the run again, as its row's `replay` says, unless the
    user gives it anew (`given`, which follow): a re-given repeatable option replaces all its recorded values, a
    re-given waiver the recorded one of that check only."""
    given_pairs = guard_pairs(given)
    given_flags = {flag for flag, _ in given_pairs}
    rewaived = {str(value).partition("=")[0].strip() for flag, value in given_pairs if flag == "--guard-waive"}
    old = guard_pairs(recorded)
    words: list[str] = []
    for row in guard_table():
        if row.replay.startswith("record:"):
            value = getattr(record, row.replay.removeprefix("record:"), None)
            if value and row.flag not in given_flags:
                words.append(f"{row.flag}={value}")
        elif row.replay == "given":
            for flag, value in old:
                if flag != row.flag or (row.kind != "waiver" and flag in given_flags):
                    continue
                if row.kind == "waiver" and str(value).partition("=")[0].strip() in rewaived:
                    continue
                words.append(flag if value is None else f"{flag}={value}")
    return words


KINDS = ("flag", "text", "path", "positive_float", "positive_int", "count", "choice", "waiver")
