"""Check 3: every path the run depends on exists — each stat under a deadline, so a hung mount cannot hang us."""

from __future__ import annotations

import getpass
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guarded_sbatch.sources.kinds import written_folder_keys
from guarded_sbatch.sbatch.script_shell import needs_shell
from guarded_sbatch.core.suggest import near_file
from guarded_sbatch.launch.context import PreflightContext
from guarded_sbatch.launch.fsinfo import StatOutcome, timed_stats
from guarded_sbatch.launch.results import CheckName, CheckResult, CheckStatus

WRITTEN_FOLDER_KEYS = written_folder_keys()  # output, checkpoint and every source kind's folder keys

NAME = CheckName.PATHS.value
# a key not listed in sources/place_keys.py whose name holds one of these parts names an output place too
OUTPUT_NAME_PARTS = ("output", "out_dir", "outdir", "save", "log_dir", "logdir", "logging_dir", "ckpt_dir", "checkpoint_dir",
                "work_dir", "run_dir", "exp_dir", "results_dir", "tensorboard",
                "default_root", "log_root", "logs_root", "exp_root", "run_root", "runs_root", "work_root")
CHECKPOINT_WORDS = (
    "resume",
    "pretrain",
    "ckpt",
    "checkpoint",
    "weights",
    "init_from",
    "load_from",
    "model_name_or_path",
    "tokenizer",
)
DATA_WORDS = ("data", "dataset", "root", "train_file", "validation_file", "val_file", "test_file", "corpus", "shards")
FILE_SUFFIXES = (".pt", ".pth", ".ckpt", ".bin", ".safetensors", ".h5", ".npz", ".npy", ".json", ".jsonl", ".yaml", ".yml",
                 ".csv", ".parquet", ".arrow", ".tar", ".txt", ".model", ".py", ".toml")


@dataclass(frozen=True)
class PathRef:
    role: str  # "config", "program", "data", "checkpoint", "output", "sbatch output", "chdir", "other"
    label: str  # where it came from: "--data_dir", "config key data.root", "#SBATCH --output"
    text: str  # as written
    path: Path | None  # None when it needs a shell to know
    must_be: str = "exists"  # "exists" | "parent exists" | "folder"


def collect_path_refs(context: PreflightContext) -> list[PathRef]:
    refs: list[PathRef] = []
    launcher = context.launcher
    files = context.intended.files if context.intended is not None else ()
    for file in files:
        refs.append(PathRef("config", "run config", str(file), file))
    if not files and launcher is not None and launcher.config_path:  # a missing --config: its `--key value`s
        refs.append(_ref(context, "config", "--config", launcher.config_path, launcher.config_unresolved))  # no pass
    if context.launch.guard_options.reference is not None:
        text = str(context.launch.guard_options.reference)
        refs.append(PathRef("config", "--guard-reference", text, context.resolve(text)))
    program = context.program_path()
    if program is not None and launcher is not None:
        refs.append(_ref(context, "program", f"launcher line {launcher.line_number}", launcher.program, False))
    values: dict[str, Any] = dict(context.intended.values) if context.intended else {}
    if launcher is not None:
        values.update({key: value for key, value in launcher.overrides.items()})
    unresolved = set(launcher.unresolved_args) if launcher else set()
    for key, value in values.items():
        if not isinstance(value, str) or not value or "://" in value:
            continue
        role = _role(key, value)
        if role is None:
            continue
        label = f"--{key}" if launcher and key in launcher.overrides else f"config key {key}"
        refs.append(_ref(context, role, label, value, value in unresolved or needs_shell(value)))
    refs.extend(_sbatch_refs(context))
    refs.extend(_guard_refs(context))
    return refs


def _guard_refs(context: PreflightContext) -> list[PathRef]:
    """The folders named to guarded-sbatch itself (--guard-tb, --guard-checkpoint-dir, ...): written by the run."""
    guard = context.launch.guard_options
    named = [("--guard-tb", p) for p in guard.tb] + [("--guard-wandb", p) for p in guard.wandb]
    named += [("--guard-log", p) for p in guard.log]
    named += [(flag, p) for flag, p in (("--guard-checkpoint-dir", guard.checkpoint_dir),
                                        ("--guard-artifact-dir", guard.artifact_dir)) if p is not None]
    base = context.submit_dir or context.workdir
    return [PathRef("output", flag, str(path), path if path.is_absolute() else base / path, "parent exists")
            for flag, path in named]


def _role(key: str, value: str) -> str | None:
    section, _, name = key.lower().replace("-", "_").rpartition(".")
    looks_like_path = value.startswith(("/", "./", "../", "~", "$")) or value.endswith(FILE_SUFFIXES)
    # a key the trainer writes (root_dir, default_root_dir, save_dir ...) is an output place, unless a data section
    # holds it (`data.root_dir`: a dataset's folder)
    in_data_section = any(word in section for word in DATA_WORDS if word != "root")
    if not in_data_section and (name in WRITTEN_FOLDER_KEYS or any(part in name for part in OUTPUT_NAME_PARTS)):
        return "output"
    if any(word in name for word in CHECKPOINT_WORDS):
        return "checkpoint" if looks_like_path else None
    if any(word in name for word in DATA_WORDS):
        return "data" if looks_like_path or "/" in value else None
    return "other" if looks_like_path and value not in ("/", "~") else None


def _ref(context: PreflightContext, role: str, label: str, text: str, unresolved: bool) -> PathRef:
    must_be = "parent exists" if role in ("output", "sbatch output") else "exists"
    return PathRef(role, label, text, None if unresolved else context.resolve(text), must_be)


def _sbatch_refs(context: PreflightContext) -> list[PathRef]:
    refs: list[PathRef] = []
    options = context.options
    chdir = options.get("chdir")
    if chdir:
        refs.append(PathRef("chdir", f"--chdir ({options.source('chdir')})", chdir, Path(chdir).expanduser(), "folder"))
    name = options.job_name or (context.launch.script.name if context.launch.script else "wrap")
    for option in ("output", "error", "input"):
        pattern = options.get(option)
        if not pattern:
            continue
        expanded = pattern.replace("%%", "\0").replace("%x", name).replace("%u", _user()).replace("\0", "%")
        label = f"--{option} ({options.source(option)})"
        folder_text = str(Path(expanded).parent)
        if re.search(r"%\d*[AajJNnst]", folder_text if option != "input" else expanded):
            refs.append(PathRef("sbatch output", label, pattern, None))
            continue
        if option == "input":
            refs.append(PathRef("data", label, pattern, context.resolve(expanded)))
        else:
            refs.append(PathRef("sbatch output", label, pattern, context.resolve(expanded), "parent exists"))
    return refs


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "%u"


def check_paths(context: PreflightContext) -> CheckResult:
    refs = collect_path_refs(context)
    if not refs:
        return CheckResult(NAME, CheckStatus.WARNED, "found no paths to verify on the launcher line or in the config")
    targets = [_target(ref) for ref in refs if ref.path is not None]
    outcomes = iter(timed_stats(targets, context.config.stat_timeout_s))
    own = _script_folder(context)
    failed: list[str] = []
    warned: list[str] = []
    evidence: list[str] = []
    for ref in refs:
        if ref.path is None:
            warned.append(f"{ref.role} path {ref.text!r} ({ref.label}) needs a shell to expand; cannot verify")
            evidence.append(f"{ref.role}: {ref.text!r} ({ref.label}): not verifiable before the job runs")
            continue
        outcome = next(outcomes)
        verdict = _verdict(ref, outcome, context.config.stat_timeout_s, own, context.workdir)
        evidence.append(f"{ref.role}: {ref.path} ({ref.label}): {verdict or 'ok'}")
        if verdict:
            # trainers create their output folder with its parents (os.makedirs); sbatch does not create its own
            trainer_creates = ref.role == "output" and not outcome.exists and not outcome.timed_out and not outcome.error
            if trainer_creates:
                verdict = f"{verdict}; the trainer must create it (most do: os.makedirs)"
                evidence[-1] = f"{ref.role}: {ref.path} ({ref.label}): {verdict}"
            (warned if ref.role == "other" or trainer_creates else failed).append(
                f"{ref.role} path {ref.path} ({ref.label}) {verdict}"
            )
    if failed:
        relative = any(ref.text and not Path(ref.text).is_absolute() and f" {ref.path} " in f" {f} " for ref in refs
                       for f in failed)
        where = f" (relative paths count from the folder you submit from, {context.workdir})" if relative else ""
        return CheckResult(NAME, CheckStatus.FAILED, "; ".join(failed) + where, tuple(evidence))
    if warned:
        return CheckResult(NAME, CheckStatus.WARNED, "; ".join(warned), tuple(evidence))
    return CheckResult(NAME, CheckStatus.PASSED, f"all {len(refs)} path(s) the run depends on are there", tuple(evidence))


def _target(ref: PathRef) -> Path:
    assert ref.path is not None
    return ref.path.parent if ref.must_be == "parent exists" else ref.path


def _script_folder(context: PreflightContext) -> Path | None:
    """The user's own folder: the batch script's (where its relative paths were written to be read from)."""
    script = context.launch.script
    if script is None:
        return None
    base = context.submit_dir or context.workdir
    return (script if script.is_absolute() else base / script).parent


def _verdict(ref: PathRef, outcome: StatOutcome, timeout_s: float, own: Path | None = None,
             workdir: Path | None = None) -> str | None:
    if outcome.timed_out:
        return f"did not answer a stat in {timeout_s:g} s (hung network mount?)"
    if outcome.error:
        return f"cannot be checked: {outcome.error}"
    if ref.must_be == "parent exists":
        if not outcome.exists:
            return (
                f"has no parent folder {outcome.path} (sbatch will not create it)"
                if ref.role == "sbatch output"
                else f"has no parent folder {outcome.path}"
            )
        return None if outcome.is_dir else f"has a parent {outcome.path} that is not a folder"
    if not outcome.exists:
        return _missing(ref, outcome.path, timeout_s, own, workdir)
    if ref.role == "config" and outcome.is_dir:
        return "is a folder, not a config file; name the file itself"
    if ref.role == "config" and outcome.special:
        return f"is {outcome.special}, not a config file: the run cannot read it (replaced? `ls -l` says by whom)"
    if ref.must_be == "folder" and not outcome.is_dir:
        return "is not a folder"
    return None


def _missing(ref: PathRef, path: Path, timeout_s: float, own: Path | None, workdir: Path | None) -> str:
    """A missing path, with what was likely meant, looked for in the user's own folder only: the same relative path
    in the script's folder (a script submitted from another folder), else a near name there. A relative path's
    folder that is not the script's (its parent, when the script is `myproj/train.sh`) is never searched."""
    relative = bool(ref.text) and not Path(ref.text).is_absolute() and not ref.text.startswith(("~", "$"))
    if relative and own is not None and workdir is not None and own.resolve() != workdir.resolve():
        there = own / ref.text
        if os.path.lexists(there):
            return (f"does not exist; it is in the script's folder, {there}: the job runs in {workdir} (submit from "
                    f"{own}, or add #SBATCH --chdir={own})")
        near = near_file(there, timeout_s)
        return f"does not exist; did you mean {near}?" if near else "does not exist"
    near = near_file(path, timeout_s)
    return f"does not exist; did you mean {near}?" if near else "does not exist"
