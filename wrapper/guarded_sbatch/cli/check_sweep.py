"""`guarded-sbatch check-sweep [guard options] sweep.yaml [--json]`: the launch pre-flight for a W&B sweep."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from guarded_sbatch.core.errors import ExitCode, UsageError
from guarded_sbatch.core.redact import redact

USAGE = "usage: guarded-sbatch check-sweep [guard options] sweep.yaml [--json]"
HELP = f"""{USAGE}

The launch pre-flight for a W&B sweep, before `wandb sweep` creates it: each
combination of the sweep's parameters becomes the command line its agent would
run, and goes through the checks a launch gets (config diff and its silent
regressors against the reference run, run name, paths, tracker, ETA). Nothing
is created or submitted. Exit 0 when every combination is clear, 3 when one is
blocked (unless waived).

options (before sweep.yaml):
  --json                  the report as JSON on stdout too (text on stderr)
  --guard-run-name PATTERN
                          each run's name, {{param}} placeholders filled per
                          combination, each one checked
                          (e.g. 'mlp-bs{{batch_size}}-lr{{lr}}')
  --guard-waive CHECK=REASON
                          waive a failed check for every combination (recorded)
  --guard-reference PATH  the reference run's config to diff each one against
  --guard-config PATH     the base config, when the sweep's program names none
  the other guard options as for a launch: guarded-sbatch --help

examples:
  guarded-sbatch check-sweep sweep.yaml
  guarded-sbatch check-sweep --guard-run-name 'bs{{batch_size}}-lr{{lr}}' sweep.yaml
  (shims/wandb first on PATH runs this for `wandb sweep sweep.yaml`)
"""
SYMBOLS = {"passed": "ok  ", "warned": "warn", "failed": "FAIL"}


def run_check_sweep(argv: list[str], *, color: bool = False) -> int:
    """`guarded-sbatch check-sweep`: every combination of a W&B sweep through the pre-flight."""
    if not argv or argv[0] in ("-h", "--help"):  # before the pre-flight loads
        print(HELP if argv else USAGE, file=sys.stdout if argv else sys.stderr, end="" if argv else "\n")
        return int(ExitCode.OK if argv else ExitCode.USAGE)
    from guarded_sbatch.core.config import load_config
    from guarded_sbatch.launch.sweep import check_sweep
    from guarded_sbatch.scheduler.local import LocalScheduler

    as_json = "--json" in argv or "--guard-json" in argv
    words = [w for w in argv if w not in ("--json", "--guard-json")]
    if not words or words[-1].startswith("-"):
        raise UsageError(f"name the sweep config last; {USAGE}")
    path = Path(words[-1])
    if not path.is_file():
        where = "" if path.is_absolute() else f" (relative to {Path.cwd()})"
        raise UsageError(f"sweep config {path} not found{where}; check the path")
    # the ETA check asks a scheduler when a run would start; a sweep's agents run where they are started
    report = check_sweep(path, words[:-1], load_config(), LocalScheduler())
    print(redact(format_sweep_report(report)), file=sys.stderr)
    if as_json:
        print(redact(json.dumps(report.to_json(), default=str)))
    return int(ExitCode.BLOCKED if report.blocked else ExitCode.OK)


def format_sweep_report(report: object) -> str:
    """The sweep's report for people: the sweep's own checks, then each combination's verdict."""
    from guarded_sbatch.launch.sweep import describe

    sweep = report.sweep  # type: ignore[attr-defined]
    shown = len(report.combinations)  # type: ignore[attr-defined]
    total = report.total_combinations  # type: ignore[attr-defined]
    title = (f"## Sweep pre-flight — {sweep.path} ({sweep.method}, program {sweep.program}, "
             f"{total} combination(s){'' if shown == total else f'; the first {shown} checked'})")
    lines = [title, ""]
    for check in report.sweep_checks:  # type: ignore[attr-defined]
        lines.append(f"[{SYMBOLS[check.status.value]}] {check.name}: {check.finding}")
        lines.extend(f"         {item}" for item in check.evidence)
    for index, (combo, result) in enumerate(report.combinations, 1):  # type: ignore[attr-defined]
        waived = {w.check for w in result.waivers}
        problems = [r for r in result.results if r.status.value != "passed"]
        verdict = "BLOCKED" if result.blocked else ("clear with waivers" if waived else "clear")
        lines.append(f"combination {index}/{total} ({describe(combo)}): {verdict}"
                     + (f", run name {result.run_name}" if result.run_name else ""))
        for check in problems:
            suffix = " (waived)" if check.name in waived else ""
            lines.append(f"    [{SYMBOLS[check.status.value]}] {check.name}: {check.finding}{suffix}")
    lines.append("")
    if report.blocked:  # type: ignore[attr-defined]
        lines.append("BLOCKED by: " + "; ".join(report.blocking()))  # type: ignore[attr-defined]
        lines.append("Fix the sweep (or the reference), or waive a check with --guard-waive NAME=\"reason\".")
    else:
        lines.append("Clear to start the sweep.")
    return "\n".join(lines)
