"""A job script's own simple assignments before its launcher line, expanded as bash would without running the
script (sbatch/script_shell.py): each case is also run by real bash, and the launcher words must match."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from e2e_helpers import make_project
from guarded_sbatch.core.config import Config
from guarded_sbatch.sbatch.argv import split_sbatch_argv
from guarded_sbatch.sbatch.script import parse_script_text
from guarded_sbatch.sbatch.script_shell import fill_job_variables
from guarded_sbatch.launch.preflight import run_preflight
from package_extras import tb_folders

LAUNCHER = 'python train.py --config "$CONFIG" --logdir "$LOGDIR"'

# (body before the launcher line, the script's arguments); every one of these is simple enough to expand
EXPANDABLE = [
    ("CONFIG=${1:-configs/x.yaml}\nLOGDIR=runs/a", []),
    ("CONFIG=${1:-configs/x.yaml}\nLOGDIR=runs/a", ["configs/given.yaml"]),
    ('CONFIG="$1"\nLOGDIR="runs/$2"', ["c.yaml", "second"]),
    ('CONFIG=${1-configs/dash.yaml}\nLOGDIR=${2:-runs/"two words"}', [""]),  # set but empty: `-` keeps it
    (': "${CONFIG:=configs/assigned.yaml}"\n: ${LOGDIR:=runs/assigned}', []),
    ('NAME=coco\nSEED=3\nexport CONFIG=configs/$NAME.yaml\nLOGDIR="runs/${NAME}-s${SEED}"', []),
    ("LOGDIR=runs/$SLURM_JOB_NAME-$SLURM_JOB_ID\nCONFIG=${CFG:-configs/default.yaml}", []),
    ('RUN=${SLURM_JOBID:-local}\nLOGDIR="runs/${RUN}"\nCONFIG=c.yaml', []),
    ('CONFIG=$1\nshift\nLOGDIR=${1:-runs/none}', ["first.yaml", "runs/after-shift"]),
    ("set -euo pipefail\nCONFIG=${1:+configs/$1.yaml}\nLOGDIR=${LOGDIR:-runs/default}", ["vit"]),
    ("CONFIG='configs/$literal.yaml'\nLOGDIR=runs/\\$x", []),
    ("CONFIG=${1:-${DEFAULT_CONFIG:-configs/nested.yaml}}\nLOGDIR=$SLURM_SUBMIT_DIR/runs/x", []),
    ("unset CONFIG\nCONFIG=${CONFIG:-configs/after-unset.yaml}\nLOGDIR=r", []),
    ("CONFIG=configs/\nCONFIG+=appended.yaml\nLOGDIR+=runs/fresh", []),
    ("CONFIG=c.yaml\nFOO=1 true\nLOGDIR=${FOO:-runs/prefix-is-not-kept}", []),
    ("NAME=vit; CONFIG=configs/$NAME.yaml; LOGDIR=runs/$NAME", []),  # one line: each command sees the ones before
    ('cd "${SLURM_SUBMIT_DIR:-.}"; CONFIG=${1:-c.yaml} LOGDIR=runs/one-line', []),
]

# (body, what the note must say): only a running shell knows these
NEEDS_SHELL = [
    ('CONFIG=configs/a.yaml\nif [ -n "${2:-}" ]; then\n  CONFIG=$2\nfi\nLOGDIR=r', "inside an if block"),
    ('CONFIG=configs/a.yaml\n[ -z "$X" ] && CONFIG=configs/b.yaml\nLOGDIR=r', "joined by &&"),
    ("CONFIG=$(ls configs | head -1)\nLOGDIR=r", "needs a shell"),
    ('case "$1" in\n  big) CONFIG=configs/big.yaml ;;\nesac\nLOGDIR=r', "inside a case block"),
    ("source env.sh\nCONFIG=${CONFIG_FROM_ENV:-configs/x.yaml}\nLOGDIR=r", "`source` on line 3 may set any variable"),
    ("CONFIG=${2:?give the config}\nLOGDIR=r", ""),
    ("read -r CONFIG < which.txt\nLOGDIR=r", "`read`"),
    ("CONFIG=${CONFIG_PATH%.yaml}.yml\nLOGDIR=r", ""),
    ("CONFIG=${SLURM_ARRAY_TASK_ID}.yaml\nLOGDIR=r", "set by Slurm only for some jobs"),
    ("CONFIG=configs/a.yaml\nCONFIG=(configs/b.yaml)\nLOGDIR=r", "an array assignment"),
    ("CONFIG=configs/a.yaml\nif CONFIG=configs/b.yaml; then :; fi\nLOGDIR=r", "the condition of a block"),
    ("N=1\nlet N=N+1\nCONFIG=configs/c$N.yaml\nLOGDIR=r", "arithmetic"),
    ("CONFIG=configs/a.yaml\nsetup() { CONFIG=configs/b.yaml; }\nLOGDIR=r", "a { } group or a function"),
    ("CONFIG=configs/a.yaml\n( CONFIG=configs/b.yaml; cd /tmp )\nLOGDIR=r", "a ( ) subshell"),
]


def _script(body: str) -> str:
    return f"#!/bin/bash\n#SBATCH --job-name=vars-test\n{body}\n{LAUNCHER}\n"


def _bash_words(body: str, args: list[str], env: dict[str, str]) -> list[str]:
    """What real bash hands to the launcher: `python` replaced by a function that prints its arguments."""
    text = f"#!/bin/bash\npython() {{ printf '%s\\0' \"$@\"; }}\n{body}\n{LAUNCHER}\n"
    done = subprocess.run(["bash", "-c", text, "script", *args], capture_output=True, text=True, env=env, timeout=10)
    assert done.returncode == 0, done.stderr
    return done.stdout.split("\0")[:-1]


@pytest.mark.parametrize(("body", "args"), EXPANDABLE)
def test_simple_assignments_expand_exactly_as_bash_does(body: str, args: list[str], tmp_path: Path) -> None:
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "SLURM_JOB_ID": "999", "SLURM_JOBID": "999"}
    job = {"SLURM_SUBMIT_DIR": str(tmp_path)}
    parsed = parse_script_text(_script(body), Path("train.sh"), env, args, job)
    launcher = parsed.launcher
    assert launcher is not None and launcher.unresolved_args == (), parsed.needs_shell
    ours = [fill_job_variables(w.text, job_id="4242", job_name="vars-test") for w in launcher.program_args]
    # the submitting shell's SLURM_JOB_ID (another job's) never leaks in: the job's own id is filled in later
    bash_env = {**env, "SLURM_JOB_ID": "4242", "SLURM_JOBID": "4242", "SLURM_JOB_NAME": "vars-test", **job}
    assert ours == _bash_words(body, args, bash_env)[1:]  # [0] is train.py


@pytest.mark.parametrize(("body", "why"), NEEDS_SHELL)
def test_anything_not_simple_stays_unresolved_with_its_reason(body: str, why: str) -> None:
    parsed = parse_script_text(_script(body), Path("train.sh"), {"PATH": "/usr/bin"}, ["x"])
    launcher = parsed.launcher
    assert launcher is not None and launcher.config_unresolved and "$CONFIG" in launcher.config_path
    assert parsed.shell is not None
    reasons = "; ".join(parsed.shell.why_unresolved(launcher.config_path or ""))
    assert why in reasons


def test_a_wandb_run_id_named_after_the_job_is_the_jobs_own(tmp_path: Path) -> None:
    root, _ = _project_script(tmp_path, 'export WANDB_RUN_ID="resnet-${SLURM_JOB_ID}"\n'
                                        'python train.py --config configs/synthetic-tanh-mlp.yaml')
    report = run_preflight(split_sbatch_argv(["train.sh"]), Config(), None, cwd=root,
                           env={"PATH": os.environ["PATH"], "SLURM_JOB_ID": "1"})  # an enclosing job's id
    plan = report.details["source_plan"]
    assert "WANDB_RUN_ID" not in plan.env  # the script sets its own: nothing exported over it
    pinned = plan.for_job("808").pinned("wandb")
    assert pinned is not None and pinned.writer.run_id == "resnet-808" and pinned.origin == "WANDB_RUN_ID set by the user"


def test_job_id_stays_symbolic_until_the_job_exists() -> None:
    parsed = parse_script_text(_script("RUN=$SLURM_JOB_ID\nLOGDIR=runs/$SLURM_JOB_NAME-$RUN\nCONFIG=c.yaml"),
                               Path("t.sh"), {"SLURM_JOB_ID": "7"}, [])
    assert parsed.variables["LOGDIR"] == "runs/${SLURM_JOB_NAME}-${SLURM_JOB_ID}"
    assert parsed.launcher is not None and parsed.launcher.overrides["logdir"] == "runs/${SLURM_JOB_NAME}-${SLURM_JOB_ID}"
    assert fill_job_variables(parsed.variables["LOGDIR"], job_id="12", job_name="n") == "runs/n-12"


def _project_script(tmp_path: Path, body: str) -> tuple[Path, str]:
    project = make_project(tmp_path)
    script = project.root / "train.sh"
    text = script.read_text().replace('python train.py --config configs/synthetic-tanh-mlp.yaml "$@"', body)
    script.write_text(text)
    return project.root, text


def test_a_config_named_by_a_default_argument_is_checked_not_blocked(tmp_path: Path) -> None:
    root, _ = _project_script(tmp_path, 'CONFIG=${1:-configs/synthetic-tanh-mlp.yaml}\n'
                                        'python train.py --config "$CONFIG" --logdir "runs/${SLURM_JOB_ID}"')
    report = run_preflight(split_sbatch_argv(["train.sh"]), Config(), None, cwd=root,
                           env={"PATH": os.environ["PATH"]})
    assert report.details["intended_config"] == str(root / "configs" / "synthetic-tanh-mlp.yaml")
    config_diff = next(r for r in report.results if r.name == "config-diff")
    assert "needs a shell" not in config_diff.finding
    plan = report.details["source_plan"]
    assert tb_folders(plan.sources) == [str(root / "runs" / "${SLURM_JOB_ID}")]
    assert tb_folders(plan.for_job("31")) == [str(root / "runs" / "31")]
    paths = next(r for r in report.results if r.name == "paths")
    assert "SLURM_JOB_ID" not in paths.finding or "needs a shell" not in paths.finding


def test_a_config_set_in_a_conditional_is_blocked_with_the_reason(tmp_path: Path) -> None:
    root, _ = _project_script(tmp_path, 'CONFIG=configs/synthetic-tanh-mlp.yaml\nif [ "$#" -gt 0 ]; then '
                                        'CONFIG=$1; fi\npython train.py --config "$CONFIG"')
    report = run_preflight(split_sbatch_argv(["train.sh"]), Config(), None, cwd=root,
                           env={"PATH": os.environ["PATH"]})
    config_diff = next(r for r in report.results if r.name == "config-diff")
    assert "'$CONFIG' needs a shell to expand (CONFIG is set inside an if block" in config_diff.finding
    assert "--guard-config" in config_diff.finding


@pytest.mark.parametrize(("export", "expected"), [
    (None, "configs/from-env.yaml"), ("CFG", "configs/from-env.yaml"), ("ALL,CFG=configs/given.yaml", "configs/given.yaml"),
    ("NONE", None),
])
def test_the_script_sees_the_environment_that_export_gives_the_job(tmp_path: Path, export: str | None,
                                                                     expected: str | None) -> None:
    script = tmp_path / "train.sh"
    directive = f"#SBATCH --export={export}\n" if export else ""
    script.write_text(f"#!/bin/bash\n#SBATCH --job-name=x\n{directive}CONFIG=${{CFG:-configs/default.yaml}}\n"
                      'python train.py --config "$CONFIG"\n')
    env = {"PATH": os.environ["PATH"], "CFG": "configs/from-env.yaml"}
    report = run_preflight(split_sbatch_argv(["train.sh"]), Config(), None, cwd=tmp_path, env=env)
    config_diff = next(r for r in report.results if r.name == "config-diff")
    if expected is None:
        assert "'$CONFIG' needs a shell to expand" in config_diff.finding
        assert "--export=NONE gives the job the user's login environment" in config_diff.finding
    else:
        assert f"the run's config {tmp_path / expected} does not exist" in config_diff.finding


def test_bash_is_there() -> None:
    assert shutil.which("bash"), "the differential cases need bash"


def test_the_everyday_default_config_script_is_checked_with_its_real_arguments(tmp_path: Path) -> None:
    """Through the CLI, as a researcher runs it: `CONFIG=${1:-...}` + `python train.py --config "$CONFIG"`."""
    project = make_project(tmp_path, history=True)
    script = project.root / "train.sh"
    script.write_text(script.read_text().replace(
        'python train.py --config configs/synthetic-tanh-mlp.yaml "$@"',
        'CONFIG=${1:-configs/synthetic-tanh-mlp.yaml}\nshift || true\npython train.py --config "$CONFIG" "$@"'))
    other = project.root / "configs" / "synthetic-tanh-mlp-wide.yaml"
    other.write_text((project.root / "configs" / "synthetic-tanh-mlp.yaml").read_text().replace("hidden: 32", "hidden: 64"))
    for args, config in (([], "synthetic-tanh-mlp.yaml"), ([str(other.relative_to(project.root)), "--steps", "10"],
                                                             "synthetic-tanh-mlp-wide.yaml")):
        checked = project.cli_here("check", "--json", "--guard-backend", "local", "train.sh", *args)
        report = json.loads(checked.stdout)
        config_diff = next(c for c in report["checks"] if c["name"] == "config-diff")
        assert "needs a shell" not in config_diff["finding"], config_diff
        assert any(f"intended: {project.root / 'configs' / config}" in line for line in config_diff["evidence"])
        assert not report["blocked"], checked.stderr


def test_a_job_array_is_not_given_one_wandb_run_id_for_all_its_tasks(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    report = run_preflight(split_sbatch_argv(["--array=0-3", "train.sh"]), Config(), None, cwd=project.root,
                           env={"PATH": os.environ["PATH"]})
    plan = report.details["source_plan"]
    assert "WANDB_RUN_ID" not in plan.env and plan.sources.pinned("wandb") is None
    assert any(kind == "wandb" and "a job array: each task starts its own W&B run" in why for kind, why in plan.pin_gaps)
    assert "MLFLOW_RUN_CONTEXT" in plan.env  # a tag shared by the tasks still names this run's MLflow runs
