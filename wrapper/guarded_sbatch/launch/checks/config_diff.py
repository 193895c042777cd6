"""Check 1: the run's config against its reference run's, key by key, naming silent regressors. The reference is a
run that finished healthy (or the one the user names): launch/preflight.py `_find_reference`."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from guarded_sbatch.launch.checks import regressors as r
from guarded_sbatch.launch.checks.config_keys import misspelled_keys
from guarded_sbatch.launch.checks.program_seed import seed_call
from guarded_sbatch.launch.context import PreflightContext
from guarded_sbatch.core.mounts import mount_of
from guarded_sbatch.launch.fsinfo import timed_stat
from guarded_sbatch.launch.reference_pin import Pin, pin_reference
from guarded_sbatch.launch.reference_search import Reference
from guarded_sbatch.launch.launcher_config import family_of, hyper_parameters, is_launcher_config
from guarded_sbatch.launch.results import CLI_WORDS, CheckName, CheckResult, CheckStatus, render_fix, worst_status
from guarded_sbatch.launch.runconfig import RunConfig, as_number
from guarded_sbatch.sbatch.options import EffectiveOptions

NAME = CheckName.CONFIG_DIFF.value
MAX_LISTED_DIFFS = 12


def check_config_diff(context: PreflightContext) -> CheckResult:
    """The diff, and before it any misspelled key (with or without a reference: a typo kills or misleads the run)."""
    result = _config_diff(context)
    intended = context.intended
    if intended is None or intended.path is None or is_launcher_config(intended):
        return result
    typos = misspelled_keys(intended, context.reference.config if context.reference else None,
                            context.program_path())
    if not typos:
        return result
    lines = [typo.line() for typo in typos]
    # a FAIL line says what failed; a diff that only warned (or could not run) is said apart, as the warning it is
    failed = result.status is CheckStatus.FAILED
    finding = "; ".join([*lines, f"fix it in {intended.path.name}", *([result.finding] if failed else [])])
    besides = () if failed else (f"also [{'warn' if result.status is CheckStatus.WARNED else 'ok'}]: {result.finding}",)
    return replace(result, status=CheckStatus.FAILED, finding=finding,
                   evidence=(*lines, *besides, *result.evidence),
                   details={**result.details, "misspelled_keys": [{"key": t.key, "meant": t.meant} for t in typos]})


def _config_diff(context: PreflightContext) -> CheckResult:
    intended = context.intended
    if intended is None and (context.intended_problem or "").endswith("does not exist"):
        # a mistyped path: the paths check fails on it and names the fix; the diff flags are not it
        return CheckResult(NAME, CheckStatus.WARNED, f"not checked: {context.intended_problem} (see paths)")
    if intended is None:
        # a file found but unreadable: its problem names the fix in the file, not a flag to name one
        fix = "" if context.intended_unreadable else "name it with {config} and the reference with {reference}"
        return _fixed(CheckStatus.FAILED, f"cannot diff: {context.intended_problem or 'no config for this run'}", fix)
    if is_launcher_config(intended):
        return _launcher_line(context, intended)
    reference = context.reference
    if reference is None:
        why = context.reference_problem or "no run of this project has finished healthy yet"
        if context.launch.guard_options.reference is not None or intended.path is None:
            # the one named is unusable (a mistake), or there is no config file: never launch on defaults alone
            return _fixed(CheckStatus.FAILED, f"no reference run ({why})", "fix {reference}",
                          (f"intended config: {intended.path or 'command-line overrides only'}",))
        # The first run of a config has nothing to be compared with; that is not wrong, only unchecked.
        return _fixed(CheckStatus.WARNED,
                      f"not checked: no reference run yet ({why}); the silent regressors (batch, LR, precision, "
                      "optimizer, workers) are judged against one. When this run finishes healthy it becomes the "
                      "reference of its config", "or name one: `guarded-sbatch reference RUN`, {reference}",
                      (f"intended config: {intended.path or 'command-line overrides only'}", _batch_text(context)))
    evidence: list[str] = [
        f"intended: {intended.path or 'command-line overrides'}"
        + (f" + overrides {', '.join(f'{k}={v}' for k, v in intended.overrides.items())}" if intended.overrides else ""),
        f"reference: {reference.config.path} ({_chosen(reference)})",
    ]
    return _diffed(context, intended, reference.config, evidence, "key(s) differ from the reference")


def _batch_text(context: PreflightContext) -> str:
    """The run's own batch over its processes, said even with nothing to compare it with."""
    assert context.intended is not None
    world, world_text = r.world_size(context.options, context.launcher, context.intended)
    return f"batch: {r.batch_shape(context.intended, world, world_text, context.launcher).explanation}"


def _chosen(reference: Reference) -> str:
    """How the reference was chosen: named (--guard-reference), or among the runs that finished healthy."""
    if reference.score is None:
        return reference.how or "given"
    among = f"similarity {reference.score:.2f} among {reference.candidates_seen} finished healthy run(s)"
    return f"{reference.how}; {among}" if reference.how else among


def _diffed(context: PreflightContext, intended: RunConfig, reference: RunConfig, evidence: list[str],
            differ: str, *, launcher_line: bool = False) -> CheckResult:
    """The key-by-key diff and the silent regressors' findings, as one result."""
    diffs = key_diff(intended, reference)
    evidence.extend(diffs[:MAX_LISTED_DIFFS])
    if len(diffs) > MAX_LISTED_DIFFS:
        evidence.append(f"... and {len(diffs) - MAX_LISTED_DIFFS} more differing keys")
    findings: list[tuple[CheckStatus, str]] = []
    findings.extend(_batch_and_lr(context, intended, reference, evidence,
                                  where="on the launcher line" if launcher_line else "in the config"))
    findings.extend(_precision(context, intended, reference))
    findings.extend(_optimizer(intended, reference))
    if not launcher_line:  # a launcher line rarely carries the seed: the program sets it
        findings.extend(_seed(context, intended, evidence))
    findings.extend(_workers(context, intended, evidence))
    pin = pin_reference(reference.files or ((reference.path,) if reference.path else ()),
                        given=context.launch.guard_options.reference is not None)
    findings.extend(_pinned(reference, pin, evidence))
    status = worst_status([status for status, _ in findings])
    problems = [text for s, text in findings if s is not CheckStatus.PASSED]
    finding = "; ".join(problems) if problems else f"{len(diffs)} {differ}, no silent regressor found"
    details = {"reference": str(reference.path), "differences": len(diffs), "reference_sha256": pin.sha256,
               "regressors": [{"status": s.value, "finding": t} for s, t in findings if s is not CheckStatus.PASSED]}
    return CheckResult(NAME, status, finding, tuple(evidence), details)


def _pinned(reference: RunConfig, pin: Pin, evidence: list[str]) -> list[tuple[CheckStatus, str]]:
    """The reference's fingerprint in the evidence; a reference others can write named, never a pass."""
    if pin.sha256:
        evidence.append(f"reference sha256: {pin.sha256}")
    if not pin.writers:
        return []
    if pin.changed_from:
        return [(CheckStatus.FAILED, f"the reference {reference.path} changed since your last pre-flight fingerprinted it "
                 f"(sha256 {pin.changed_from[:12]}… -> {pin.sha256[:12]}…) and others can write it ({pin.writers}): "
                 "check its content, then name it with --guard-reference FILE to accept it as it is")]
    return [(CheckStatus.WARNED, f"the reference {reference.path} can be written by others ({pin.writers}): its diff "
             "is not trusted to pass; chmod g-w it, or name it with --guard-reference FILE")]


def _launcher_line(context: PreflightContext, intended: RunConfig) -> CheckResult:
    """No config file: the launcher line is diffed against the one of its program's reference run."""
    program = family_of(intended)
    line = context.launcher.text.strip() if context.launcher is not None else "no launcher line found"
    evidence = [f"no config file: the launcher line is the run's config ({line})",
                f"settings on it: {', '.join(hyper_parameters(intended)) or 'none'}"]
    reference = context.reference
    if reference is None:
        return _fixed(CheckStatus.WARNED,
                      f"new project: no guarded run of {program} has finished healthy yet, nothing to diff its "
                      "launcher line against; when one finishes healthy it is the reference of the next launch of "
                      "the same program",
                      "or name one: `guarded-sbatch reference RUN`; a config file is diffed too: {config}",
                      tuple(evidence))
    if not hyper_parameters(intended) and not hyper_parameters(reference.config):
        return _fixed(CheckStatus.WARNED, "not checked: no config file is named and the launcher line sets no "
                      "hyper-parameter, so there is nothing to diff", "name the run's config with {config}",
                      tuple(evidence))
    evidence.append(f"reference: {reference.how}")
    return _diffed(context, intended, reference.config, evidence, "setting(s) differ from the reference run's "
                   "launcher line", launcher_line=True)


def _fixed(status: CheckStatus, problem: str, fix: str, evidence: tuple[str, ...] = ()) -> CheckResult:
    """A result whose finding ends with its fix: in the CLI's words here, in any front end's by finding_for."""
    finding = f"{problem}; {render_fix(fix, NAME, CLI_WORDS)}" if fix else problem
    return CheckResult(NAME, status, finding, evidence, fix=fix)


def key_diff(intended: RunConfig, reference: RunConfig) -> list[str]:
    lines: list[str] = []
    for key in sorted(set(intended.values) | set(reference.values)):
        mine, theirs = intended.values.get(key, _MISSING), reference.values.get(key, _MISSING)
        if mine == theirs:
            continue
        if mine is _MISSING:
            lines.append(f"- {key}: {theirs!r} in the reference, missing here")
        elif theirs is _MISSING:
            lines.append(f"+ {key}: {mine!r} (not in the reference)")
        else:
            lines.append(f"~ {key}: {theirs!r} -> {mine!r}")
    return lines


_MISSING: Any = object()


def _batch_and_lr(
    context: PreflightContext, intended: RunConfig, reference: RunConfig, evidence: list[str], *, where: str
) -> list[tuple[CheckStatus, str]]:
    world, world_text = r.world_size(context.options, context.launcher, intended)
    mine = r.batch_shape(intended, world, world_text, context.launcher)
    ref_world, ref_world_text = r.world_size(_NO_OPTIONS, None, reference)
    assumed = ref_world == 1 and ref_world_text.startswith("one process")
    if assumed:
        ref_world, ref_world_text = world, f"{world_text} (assumed the same as this run)"
    theirs = r.batch_shape(reference, ref_world, ref_world_text)
    evidence.append(f"batch here: {mine.explanation}")
    evidence.append(f"batch in the reference: {theirs.explanation}")
    out: list[tuple[CheckStatus, str]] = []
    if mine.global_batch is None:
        return [(CheckStatus.WARNED, f"no batch size {where}: the framework default applies")]
    if mine.per_device is not None and mine.per_device != int(mine.per_device):
        out.append((CheckStatus.FAILED, f"global batch {mine.global_batch:g} does not divide over {world} process(es) × "
                                        f"accumulation {mine.accumulation:g}"))
    if mine.ambiguous:
        evidence.append(
            f"a plain batch size is per process under DDP: {world} processes make the global batch {mine.global_batch:g}"
        )
    if theirs.global_batch is None:
        return out
    if mine.accumulation != theirs.accumulation:
        evidence.append(f"gradient accumulation {theirs.accumulation:g} -> {mine.accumulation:g}")
    ratio = mine.global_batch / theirs.global_batch
    if abs(ratio - 1.0) < 1e-9:
        if mine.accumulation != theirs.accumulation:
            out.append((CheckStatus.WARNED, f"gradient accumulation changed {theirs.accumulation:g} -> "
                                            f"{mine.accumulation:g} (global batch kept at {mine.global_batch:g})"))
        return out
    out.append(_lr_for_new_batch(context, intended, reference, mine, theirs, ratio))
    return out


def _lr_for_new_batch(context: PreflightContext, intended: RunConfig, reference: RunConfig, mine: r.BatchShape,
                      theirs: r.BatchShape, ratio: float) -> tuple[CheckStatus, str]:
    """A global batch changed by `ratio`: whether the learning rate (or the sweep's rates) followed it."""
    lr_mine = _number(intended, r.LEARNING_RATE)
    lr_theirs = _number(reference, r.LEARNING_RATE)
    change = f"global batch {theirs.global_batch:g} -> {mine.global_batch:g} (×{ratio:g})"
    if mine.accumulation != theirs.accumulation:
        change += f", gradient accumulation {theirs.accumulation:g} -> {mine.accumulation:g}"
    if lr_mine is None or lr_theirs is None:
        return CheckStatus.FAILED, f"{change} and no learning rate to compare: set it explicitly"
    if len(context.swept_lr) > 1:  # a sweep searches the LR: it must search where the new batch wants it
        return _swept_lr_covers(change, ratio, lr_theirs, context.swept_lr)
    rule = r.lr_rescaled(ratio, lr_mine / lr_theirs)
    if rule is None:
        return (CheckStatus.FAILED, f"{change} but the learning rate was not rescaled ({lr_theirs:g} -> "
                                    f"{lr_mine:g}; linear rule: {lr_theirs * ratio:g})")
    return (CheckStatus.WARNED, f"{change}; learning rate rescaled by the {rule} rule ({lr_theirs:g} -> "
                                f"{lr_mine:g})")


def _swept_lr_covers(change: str, ratio: float, lr_theirs: float, swept: tuple[float, ...]) -> tuple[CheckStatus, str]:
    """An lr x batch-size grid is no regressor when its learning rates reach the reference's LR rescaled for this
    batch (linear or square-root rule, 5 % slack); one that misses it trains the whole batch size at a wrong rate."""
    low, high = min(swept), max(swept)
    targets = {"linear": lr_theirs * ratio, "square-root": lr_theirs * math.sqrt(ratio)}
    covered = [rule for rule, target in targets.items() if low * 0.95 <= target <= high * 1.05]
    rescaled = f"linear rule {targets['linear']:g}, square-root rule {targets['square-root']:g}"
    if covered:
        return (CheckStatus.WARNED, f"{change}; the sweep's learning rates ({low:g} .. {high:g}) reach the rescaled "
                                    f"value ({rescaled})")
    return (CheckStatus.FAILED, f"{change} but the sweep's learning rates ({low:g} .. {high:g}) miss the reference's "
                                f"{lr_theirs:g} rescaled for it ({rescaled}): widen the lr range or scale it with the "
                                "batch")


def _precision(context: PreflightContext, intended: RunConfig, reference: RunConfig) -> list[tuple[CheckStatus, str]]:
    mine = r.precision_of(intended, context.launcher)
    theirs = r.precision_of(reference)
    if theirs is None or (mine is not None and mine[0] == theirs[0]):
        return []
    if mine is None:
        return [(CheckStatus.FAILED, f"precision not set here (framework default, usually fp32) but the reference uses "
                                     f"{theirs[0]} ({theirs[1]})")]
    return [(CheckStatus.FAILED, f"precision {theirs[0]} -> {mine[0]} ({mine[1]}): fp16 and bf16 train differently")]


def _optimizer(intended: RunConfig, reference: RunConfig) -> list[tuple[CheckStatus, str]]:
    out: list[tuple[CheckStatus, str]] = []
    for label, aliases in (("optimizer betas", r.BETAS), ("weight decay", r.WEIGHT_DECAY)):
        mine, theirs = r.values_of(intended, aliases), r.values_of(reference, aliases)
        if not theirs or _normalized(mine) == _normalized(theirs):
            continue
        if not mine:
            out.append((CheckStatus.WARNED, f"{label} missing here (framework default) but set in the reference: "
                                            f"{_show(theirs)}"))
        else:
            out.append((CheckStatus.WARNED, f"{label} changed: {_show(theirs)} -> {_show(mine)}"))
    return out


def _seed(context: PreflightContext, intended: RunConfig, evidence: list[str]) -> list[tuple[CheckStatus, str]]:
    found = intended.find(r.SEED)
    if found is not None and found[1] is not None:
        return []
    program = context.program_path()
    in_code = seed_call(program) if program is not None else None
    if in_code is not None:
        evidence.append(f"seed set in the program: {in_code}")
        return []
    return [(CheckStatus.FAILED, "no seed set (not in the config, no seeding call in the program): the run cannot "
                                 "be reproduced; add seed=<n> to the config")]


def _workers(context: PreflightContext, intended: RunConfig, evidence: list[str]) -> list[tuple[CheckStatus, str]]:
    data = intended.find(r.DATA_PATH)
    if data is None or not isinstance(data[1], str) or "$" in data[1]:
        return []
    outcome = timed_stat(context.resolve(data[1]), context.config.stat_timeout_s)
    where = outcome.resolved or context.resolve(data[1])
    mount = mount_of(where, context.mounts)
    if mount is None:
        return []
    evidence.append(f"data path {data[1]} is on {mount.fs_type} (mounted at {mount.mount_point} from {mount.source})")
    if not mount.is_network:
        return []
    workers = intended.find(r.WORKERS)
    limit = context.config.max_workers_on_network_fs
    if outcome.timed_out:
        return [(CheckStatus.FAILED, f"data path {data[1]} on {mount.fs_type} did not answer a stat in "
                                     f"{context.config.stat_timeout_s:g} s")]
    if workers is None:
        return [(CheckStatus.WARNED, f"dataloader workers not set and the data is on {mount.fs_type}: set num_workers ≤ "
                                     f"{limit}")]
    count = as_number(workers[1])
    if count is not None and count > limit:
        return [(CheckStatus.FAILED, f"{workers[0]}={count:g} dataloader workers on a {mount.fs_type} data path "
                                     f"({data[1]}): use ≤ {limit} or stage the data to local disk")]
    return []


def _number(config: RunConfig, aliases: tuple[str, ...]) -> float | None:
    found = config.find(aliases)
    return as_number(found[1]) if found else None


def _normalized(values: dict[str, Any]) -> list[Any]:
    return sorted((str(v) for v in values.values()))


def _show(values: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(values.items()))


_NO_OPTIONS = EffectiveOptions({})  # the reference's job shape is only known from its config
