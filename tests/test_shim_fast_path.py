"""The sbatch shim's bash fast path: never takes a job the exact (Python) decision would guard.

The shim is run for real; the "real sbatch" it execs is a stand-in that prints its arguments (fault
injection only: the shim's routing is what is observed). For every case, when the fast path hands a call
to sbatch, guarded_sbatch.site.shim_decision.decide must agree that it is not a training job.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from guarded_sbatch.sbatch.spec import SBATCH_OPTIONS, ArgKind
from guarded_sbatch.site.shim_decision import decide

REPO = Path(__file__).resolve().parents[1]
SHIM = REPO / "shims" / "sbatch"


def _shim_list(name: str) -> str:
    match = re.search(rf'^{name}="([^"]*)"$', SHIM.read_text(), re.M)
    assert match, name
    return match.group(1)


def test_the_shims_option_lists_agree_with_sbatchs_table() -> None:
    required = {n for n, (_, kind) in SBATCH_OPTIONS.items() if kind is ArgKind.REQUIRED}
    assert set(_shim_list("_value_long").split()) == required
    assert set(_shim_list("_flag_long").split()) == set(SBATCH_OPTIONS) - required
    assert set(_shim_list("_value_short")) == {s for s, kind in SBATCH_OPTIONS.values() if s and kind is ArgKind.REQUIRED}
    assert set(_shim_list("_flag_short")) == {s for s, kind in SBATCH_OPTIONS.values() if s and kind is ArgKind.NONE}


@pytest.fixture()
def shim_env(tmp_path: Path) -> dict[str, str]:
    fake = tmp_path / "bin" / "sbatch"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\necho "REAL SBATCH $*"\n')
    fake.chmod(0o755)
    return {**{k: v for k, v in os.environ.items() if not k.startswith("GUARDED_SBATCH_")},
            "GUARDED_SBATCH_REAL_SBATCH": str(fake), "GUARDED_SBATCH_PYTHON": sys.executable,
            "GUARDED_SBATCH_SHIM_DEBUG": "1", "GUARDED_SBATCH_STATE_DIR": str(tmp_path / "state"),
            "XDG_CACHE_HOME": str(tmp_path / "cache"), "HOME": str(tmp_path)}


def _run_shim(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SHIM), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)


def _scripts(tmp_path: Path) -> dict[str, Path]:
    texts = {
        "plain.sh": "#!/bin/bash\n#SBATCH --time=5\nhostname\nsleep 1\n",
        "train.sh": "#!/bin/bash\n#SBATCH --job-name=coco-resnet50-bs256-lr3e-4\npython train.py --config c.yaml\n",
        "commented.sh": "#!/bin/bash\n# python train.py  (only in a comment)\necho hello\n",
        "site.sh": "#!/bin/bash\nbash run_pretrain.sh\n",
    }
    paths = {}
    for name, text in texts.items():
        paths[name] = tmp_path / name
        paths[name].write_text(text)
    return paths


CASES = [
    ["--wrap", "hostname"], ["--wrap=hostname"], ["-p", "debug", "--wrap", "sleep 1"], ["-N1", "-n", "2", "plain.sh"],
    ["--time", "5", "plain.sh", "arg"], ["-Hv", "plain.sh"], ["--help"], ["--test-only", "train.sh"], ["-h"],
    ["train.sh"], ["--wrap", "python train.py"], ["--wrap", "torchrun --nproc-per-node 2 train.py"],
    ["commented.sh"], ["--tim=5", "plain.sh"], ["-J", "x", "--", "plain.sh"], ["--parsable", "plain.sh"],
    ["--guard-waive", "eta=x", "plain.sh"], ["missing.sh"], ["site.sh"], ["--wrap", "bash run_pretrain.sh"],
    [],
]


@pytest.mark.parametrize("args", CASES, ids=[" ".join(c) or "<stdin>" for c in CASES])
def test_the_fast_path_only_takes_what_the_exact_decision_lets_through(
        args: list[str], shim_env: dict[str, str], tmp_path: Path) -> None:
    _scripts(tmp_path)
    out = _run_shim(args, shim_env, tmp_path)
    if "(fast path)" in out.stderr:
        assert out.stdout.startswith("REAL SBATCH"), out
        guard, why = _decide_in(tmp_path, args, shim_env)
        assert not guard, f"fast path took a job the exact decision guards: {why}"


def _decide_in(folder: Path, args: list[str], env: dict[str, str]) -> tuple[bool, str]:
    previous = Path.cwd()
    os.chdir(folder)
    try:
        return decide(args, env)
    finally:
        os.chdir(previous)


def test_plain_jobs_take_the_fast_path_and_training_jobs_do_not(shim_env: dict[str, str], tmp_path: Path) -> None:
    _scripts(tmp_path)
    fast = [["--wrap", "hostname"], ["-N1", "-n", "2", "plain.sh"], ["commented.sh"], ["--help"], []]
    for args in fast:
        assert "(fast path)" in _run_shim(args, shim_env, tmp_path).stderr, args
    slow = [["train.sh"], ["--wrap", "python train.py"], ["--tim=5", "plain.sh"], ["missing.sh"]]
    for args in slow:
        assert "(fast path)" not in _run_shim(args, shim_env, tmp_path).stderr, args


def test_the_sites_training_commands_are_honoured_through_the_cache(shim_env: dict[str, str], tmp_path: Path) -> None:
    _scripts(tmp_path)
    site = tmp_path / "site.toml"
    site.write_text('[enforcement]\nunguarded_training = "tag"\ntraining_commands = ["run_pretrain.sh"]\n')
    env = {**shim_env, "GUARDED_SBATCH_SITE_CONFIG": str(site)}
    first = _run_shim(["--wrap", "hostname"], env, tmp_path)
    assert "(fast path)" not in first.stderr and first.stdout.startswith("REAL SBATCH")  # no cache yet: Python
    cache = tmp_path / "cache" / "guarded-sbatch" / "shim-training-commands"
    assert cache.read_text() == f"site={site}\nrun_pretrain.sh\n"
    assert "(fast path)" in _run_shim(["--wrap", "hostname"], env, tmp_path).stderr
    assert "(fast path)" not in _run_shim(["site.sh"], env, tmp_path).stderr  # the site's needle: Python decides
    os.utime(site, (cache.stat().st_mtime + 10, cache.stat().st_mtime + 10))  # the site config changed
    assert "(fast path)" not in _run_shim(["--wrap", "hostname"], env, tmp_path).stderr
