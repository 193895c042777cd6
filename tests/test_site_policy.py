"""The shared marker, the site's training-job rule (Python and the plugins' Lua agree), the rendered Lua
policy, and locked keys refused through the sbatch shim. No Slurm needed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from guarded_sbatch.core.errors import UsageError
from guarded_sbatch.sbatch.argv import split_sbatch_argv
from guarded_sbatch.sbatch.script import parse_script
from guarded_sbatch.scheduler.interface import SubmitRequest
from guarded_sbatch.scheduler.slurm import sbatch_words
from guarded_sbatch.launch.marking import MarkingScheduler, comment_with_marker, is_guarded, marker_in, script_digest
from guarded_sbatch.site.enforcement import EnforcementPolicy, load_policy, policy_from_table, render_lua_policy, training_reason
from test_site_helpers import PLUGINS, REPO, lua_interpreter, site_config

# (script body after the #! line, is it training under the default policy?)
SCRIPTS = {
    "torchrun_behind_srun": ("#SBATCH -n 1\nexport X=1\nsrun -n 4 --gpus-per-task 1 torchrun --nproc_per_node 4 "
                             "train.py --config a.yaml\n", True),
    "plain_shell": ("hostname\necho python train.py\n", False),
    "inline_and_exempt": ('python -c "print(1)"\npython -m pip install x\nexec python3 -m guarded_sbatch sidecar\n',
                          False),
    "heredoc_then_continued": ("cat <<EOF\npython train.py\nEOF\ncd x && python \\\n  train.py --lr 1\n", True),
    "submitit": ("srun python -u -m submitit.core._submit /folder\n", False),
    "accelerate": ("accelerate launch --num_processes 2 --multi_gpu train.py\n", True),
    "deepspeed_env_prefix": ("env NCCL_DEBUG=INFO deepspeed --num_gpus 8 pretrain.py --deepspeed ds.json\n", True),
    "python_module": ("time python -m mypkg.train lr=3e-4\n", True),
    "site_command": ("./run_pretrain.sh --big\n", False),
}


def _write(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / f"{name}.sh"
    path.write_text(f"#!/bin/bash\n{body}")
    return path


def test_marker_is_the_adler32_of_the_script_and_keeps_the_users_comment() -> None:
    script = b"#!/bin/bash\npython train.py\n"
    assert script_digest(script) == f"{zlib.adler32(script):08x}"
    comment = comment_with_marker("ablation for the paper", "preflight", script)
    assert comment == f"ablation for the paper guarded-sbatch:preflight={script_digest(script)}"
    assert comment_with_marker(comment, "preflight", script) == comment  # idempotent (restart replays options)
    assert marker_in(comment) == ("preflight", script_digest(script))
    assert is_guarded(comment, script)
    assert not is_guarded(comment, script + b"echo changed\n")  # a marker copied onto another script
    assert not is_guarded("guarded-sbatch:preflight=zzzzzzzz", script)


def test_marking_scheduler_marks_training_and_sidecar_submissions(tmp_path: Path) -> None:
    train = _write(tmp_path, "train", "#SBATCH --comment=from-the-script\npython train.py\n")
    sidecar = _write(tmp_path, "sidecar", "exec python -m guarded_sbatch sidecar\n")
    launch = split_sbatch_argv(["--time=1:00:00", str(train)])
    marking = MarkingScheduler(object(), launch.script, launch.parsed_options)
    request = marking.marked(SubmitRequest(script=train, sbatch_options=launch.sbatch_options))
    assert request.sbatch_options == ("--time=1:00:00",)  # the user's options are kept as they are, in order
    assert request.comment == f"from-the-script guarded-sbatch:preflight={script_digest(train.read_bytes())}"
    assert sbatch_words(request)[-1] == f"--comment={request.comment}"  # Slurm's last --comment wins
    overridden = split_sbatch_argv(["--comment", "cli wins", str(train)])
    marked = MarkingScheduler(object(), overridden.script, overridden.parsed_options).marked(
        SubmitRequest(script=train, sbatch_options=overridden.sbatch_options))
    assert marked.comment is not None and marked.comment.startswith("cli wins guarded-sbatch:preflight=")
    side = marking.marked(SubmitRequest(script=sidecar, after="1"))
    assert side.comment == f"guarded-sbatch:sidecar={script_digest(sidecar.read_bytes())}"
    assert sbatch_words(side) == ["--dependency=after:1", "--kill-on-invalid-dep=yes", f"--comment={side.comment}"]


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_training_rule(tmp_path: Path, name: str) -> None:
    body, expected = SCRIPTS[name]
    reason = training_reason(parse_script(_write(tmp_path, name, body)), EnforcementPolicy())
    assert (reason is not None) == expected, reason
    site = policy_from_table({"training_commands": ["run_pretrain.sh"]}, "test")
    if name == "site_command":
        assert training_reason(parse_script(_write(tmp_path, name, body)), site) == "line 2: ./run_pretrain.sh --big"


def test_plugins_lua_agrees_with_python_on_digest_and_training(tmp_path: Path) -> None:
    lua = lua_interpreter()
    policy = policy_from_table({"training_commands": ["run_pretrain.sh"]}, "test")
    plugin_dir = tmp_path / "plugins"
    plugin_dir.mkdir()
    shutil.copy(PLUGINS / "guarded_sbatch_lib.lua", plugin_dir)
    (plugin_dir / "guarded_sbatch_policy.lua").write_text(render_lua_policy(policy))
    paths = [_write(tmp_path, name, body) for name, (body, _) in sorted(SCRIPTS.items())]
    big = tmp_path / "big.sh"
    big.write_bytes(b"#!/bin/bash\n" + bytes(range(256)) * 9000 + b"\npython train.py\n")  # > one Lua chunk
    paths.append(big)
    runner = tmp_path / "run.lua"
    runner.write_text(
        'local lib = dofile(arg[1] .. "/guarded_sbatch_lib.lua")\nlocal policy = lib.load_policy(arg[1])\n'
        'for i = 2, #arg do local f = io.open(arg[i], "rb") local s = f:read("*a") f:close()\n'
        '  print(lib.adler32(s) .. "\\t" .. tostring(lib.training_line(s, policy))) end\n')
    out = subprocess.run([lua, str(runner), str(plugin_dir), *map(str, paths)], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0, out.stderr
    rows = [line.split("\t") for line in out.stdout.splitlines()]
    for path, (digest, lua_reason) in zip(paths, rows, strict=True):
        assert digest == script_digest(path.read_bytes()), path.name
        if path is not big:
            python_reason = training_reason(parse_script(path), policy)
            assert lua_reason == (python_reason if python_reason else "nil"), path.name


def test_rendered_policy_loads_in_lua_with_awkward_strings(tmp_path: Path) -> None:
    lua = lua_interpreter()
    policy = policy_from_table({"unguarded_training": "tag", "tag": 'unguarded "x" \\ ü',
                                "training_commands": ["a;b", "ä"]}, "test")
    (tmp_path / "p.lua").write_text(render_lua_policy(policy))
    out = subprocess.run([lua, "-e", f'local p = dofile("{tmp_path}/p.lua") io.write(p.unguarded_training, "|", p.tag, '
                          '"|", p.training_commands[1], "|", p.training_commands[2], "|", p.tag_field)'],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout == 'tag|unguarded "x" \\ ü|a;b|ä|admin_comment'


def test_bad_policy_is_one_clear_line(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="unguarded_training' must be \"reject\", \"tag\" or \"allow\""):
        load_policy(site_config(tmp_path, policy="block"))
    with pytest.raises(UsageError, match="unknown launcher 'mpirun'"):
        policy_from_table({"launchers": ["mpirun"]}, "x")
    example = load_policy(REPO / "site_configs" / "example-site.toml")
    assert example.unguarded_training == "reject" and "guarded_sbatch" in example.exempt_programs


def test_render_command_writes_the_policy_file(tmp_path: Path) -> None:
    target = tmp_path / "guarded_sbatch_policy.lua"
    out = subprocess.run([sys.executable, "-m", "guarded_sbatch", "admin", "render-policy", str(site_config(tmp_path)),
                          str(target)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert 'unguarded_training = "reject"' in target.read_text()
    missing = subprocess.run([sys.executable, "-m", "guarded_sbatch", "admin", "render-policy", str(tmp_path / "nope.toml")],
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "is not a file" in missing.stderr


def test_user_config_loosening_a_locked_key_is_refused_through_the_shim(tmp_path: Path) -> None:
    site = site_config(tmp_path)
    user = tmp_path / "user.toml"
    user.write_text('[checks]\nmandatory = []\n')
    train = _write(tmp_path, "train", "#SBATCH --job-name=coco-resnet50-bs256-lr3e-4\npython train.py\n")
    env = {**os.environ, "GUARDED_SBATCH_SITE_CONFIG": str(site), "GUARDED_SBATCH_USER_CONFIG": str(user),
           "GUARDED_SBATCH_PYTHON": sys.executable, "GUARDED_SBATCH_REAL_SBATCH": shutil.which("sbatch") or "/bin/false",
           "GUARDED_SBATCH_STATE_DIR": str(tmp_path / "state")}
    out = subprocess.run([str(REPO / "shims" / "sbatch"), str(train)], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip().splitlines() == [
        f"guarded-sbatch: error: {user}: 'checks.mandatory' is locked by the site config {site}; remove it from your config"
    ]


def test_plugin_dir_names_the_installed_lua_plugins() -> None:
    out = subprocess.run([sys.executable, "-m", "guarded_sbatch", "admin", "plugin-dir"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert {p.name for p in Path(out.stdout.strip()).glob("*.lua")} >= {"job_submit.lua", "cli_filter.lua"}
