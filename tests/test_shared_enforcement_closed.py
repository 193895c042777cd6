"""Round 3 of the shared cluster, enforcement fails closed. The shipped job_submit.lua under policy "reject" (run by
a Lua interpreter with Slurm's plugin table), the shim's Python rule and its bash fast path all treat as training
the launch forms that used to pass (`\\python`, a line continuation inside `python`, `exec -a N python`,
`time -p python`, `exec env -i ... python`, `case x in x) python ...;; esac`, a quoted or variable command); the
site config at /etc/guarded-sbatch/site.toml is read whatever the user's environment says (unsetting or
redirecting GUARDED_SBATCH_SITE_CONFIG drops no mandatory check), seen by a real user in a mount namespace; and
`--config missing.yaml` followed by `--key value` fails the mandatory `paths` check."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from e2e_helpers import EXAMPLE
from shared_cluster import REPO, SharedCluster, shared_cluster_fixture  # noqa: F401 - the fixture
from test_site_helpers import PLUGINS, lua_interpreter
from guarded_sbatch.sbatch.script import parse_script
from guarded_sbatch.site.enforcement import policy_from_table, render_lua_policy, training_reason
from guarded_sbatch.site.shim_decision import decide

FORMS = {
    "backslash": "\\python train.py\n",
    "continuation": "pyt\\\nhon train.py --lr 0.1\n",
    "exec_a": "exec -a N python train.py\n",
    "time_p": "time -p python train.py\n",
    "exec_env_i": "exec env -i PATH=/usr/bin HOME=/tmp python train.py\n",
    "case": "case x in x) python train.py;; esac\n",
    "quoted": '"python" train.py\n',
    "subshell": "(cd /tmp && python train.py)\n",
    "bash_c": "bash -c 'python train.py'\n",
    "variable": "$PYTHON train.py\n",
}
HARMLESS = {"echo": "echo python is great\n", "inline": "time -p python -c 'print(1)'\n",
            "pip": "exec env -i python -m pip install x\n", "hostname": "srun hostname\n",
            "heredoc": "cat <<EOF\npython train.py\nEOF\n"}
JOB_SUBMIT = """package.path = ''
slurm = { SUCCESS = 0, ERROR = -1, log_info = function() end, log_error = function() end,
          log_user = function(fmt, text) io.stderr:write(text, "\\n") end }
dofile(arg[1] .. "/job_submit.lua")
for i = 2, #arg do
  local f = io.open(arg[i], "rb") local s = f:read("*a") f:close()
  print(slurm_job_submit({ script = s, comment = nil }, {}, 1000) == slurm.ERROR and "rejected" or "accepted")
end
"""


def _scripts(folder: Path, forms: dict[str, str]) -> dict[str, Path]:
    paths = {}
    for name, body in forms.items():
        paths[name] = folder / f"{name}.sh"
        paths[name].write_text("#!/bin/bash\n#SBATCH --time=1\n" + body)
    return paths


def test_the_shipped_job_submit_rejects_every_launch_form_under_reject(tmp_path: Path) -> None:
    plugins = tmp_path / "slurm"
    plugins.mkdir()
    for name in ("job_submit.lua", "guarded_sbatch_lib.lua"):
        shutil.copy(PLUGINS / name, plugins)
    (plugins / "guarded_sbatch_policy.lua").write_text(render_lua_policy(policy_from_table({"unguarded_training": "reject"},
                                                                                           "test")))
    runner = tmp_path / "submit.lua"
    runner.write_text(JOB_SUBMIT)
    scripts = _scripts(tmp_path, {**FORMS, **HARMLESS})
    names = sorted(scripts)
    out = subprocess.run([lua_interpreter(), str(runner), str(plugins), *(str(scripts[n]) for n in names)],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    verdicts = dict(zip(names, out.stdout.split(), strict=True))
    assert {n: verdicts[n] for n in FORMS} == dict.fromkeys(FORMS, "rejected")
    assert {n: verdicts[n] for n in HARMLESS} == dict.fromkeys(HARMLESS, "accepted")
    policy = policy_from_table({}, "test")  # the shim's Python rule agrees, line for line
    for name, path in scripts.items():
        assert (training_reason(parse_script(path), policy) is not None) == (name in FORMS), name


@pytest.mark.parametrize("name", sorted(FORMS))
def test_the_shim_guards_every_launch_form_and_its_fast_path_never_skips_one(tmp_path: Path, name: str) -> None:
    script = _scripts(tmp_path, {name: FORMS[name]})[name]
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    guard, why = decide([str(script)], env)
    assert guard and why.startswith("training job (line"), why
    shim = subprocess.run([str(REPO / "shims" / "sbatch"), str(script)], capture_output=True, text=True, timeout=30,
                          cwd=tmp_path, env={**env, "GUARDED_SBATCH_SHIM_DEBUG": "1", "GUARDED_SBATCH_REAL_SBATCH": "/bin/true",
                                             "GUARDED_SBATCH_PYTHON": "/bin/false"})
    assert "fast path" not in shim.stderr and shim.returncode != 0, shim.stderr  # handed to Python's rule


def test_the_fast_path_still_passes_a_script_with_no_launcher(tmp_path: Path) -> None:
    script = _scripts(tmp_path, {"hostname": "srun hostname\n"})["hostname"]
    shim = subprocess.run([str(REPO / "shims" / "sbatch"), str(script)], capture_output=True, text=True, timeout=30,
                          cwd=tmp_path, env={"PATH": os.environ["PATH"], "HOME": str(tmp_path), "GUARDED_SBATCH_SHIM_DEBUG": "1",
                                             "GUARDED_SBATCH_REAL_SBATCH": "/bin/true", "GUARDED_SBATCH_PYTHON": "/bin/false"})
    assert shim.returncode == 0 and "fast path" in shim.stderr, shim.stderr


SYSTEM = Path("/etc/guarded-sbatch")


def test_the_system_site_config_holds_whatever_the_environment_says(shared_cluster: SharedCluster) -> None:
    cluster = shared_cluster
    require_unshare()
    project = cluster.copy_project(EXAMPLE, "sitecfg")
    script = project / "train.sh"
    script.write_text(script.read_text().replace('--config configs/synthetic-tanh-mlp.yaml "$@"',
                                                 "--config configs/missing.yaml --lr 0.1"))
    site_dir = cluster.base / "etc-guarded-sbatch"
    site_dir.mkdir()
    os.chmod(site_dir, 0o755)
    (site_dir / "site.toml").write_text('[checks]\nmandatory = ["paths"]\n')
    os.chmod(site_dir / "site.toml", 0o644)
    lenient = cluster.project / "lenient-site.toml"  # the co-worker's, named in the victim's environment
    cluster.write_as(cluster.coworker, lenient, "[checks]\nmandatory = []\n")
    created = not SYSTEM.exists()
    SYSTEM.mkdir(exist_ok=True)  # an empty mount point: no site config for anyone outside the namespace
    try:
        for extra in ({}, {"GUARDED_SBATCH_SITE_CONFIG": str(lenient)}):
            env = cluster.env(cluster.victim, GUARDED_SBATCH_BACKEND="local", OPENBLAS_NUM_THREADS="1", **extra)
            inner = ["setpriv", f"--reuid={cluster.victim.uid}", f"--regid={cluster.victim.gid}", "--init-groups", "--",
                     str(cluster.python), "-P", "-m", "guarded_sbatch", "check", "--guard-waive", "paths=trust me",
                     "train.sh"]
            result = subprocess.run(["unshare", "-m", "sh", "-c", f'mount --bind "$0" {SYSTEM} && exec "$@"',
                                     str(site_dir), *inner], cwd=project, env=env, capture_output=True, text=True,
                                    timeout=180)
            if extra:  # round 4: a config another user wrote is refused as code, with the reason (core/config.py)
                assert result.returncode == 2, result.stderr
                assert f"config {lenient} refused: it belongs to {cluster.coworker.name}" in result.stderr
                continue
            assert result.returncode == 3, result.stderr
            assert "[FAIL] paths: config path" in result.stderr and "missing.yaml" in result.stderr, result.stderr
            assert "waiver refused: paths" in result.stderr, result.stderr  # mandatory: not waivable
    finally:
        if created:
            SYSTEM.rmdir()


def require_unshare() -> None:
    from conftest import require

    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, timeout=30)
    require(probe.returncode == 0, "needs unshare -m (a mount namespace) to place a system site config")
