"""Launch forms the launcher-line rule used to miss are training jobs for the shim (Python) and the Slurm plugins
(Lua) alike: srun with its own options, mpirun -np, timeout, containers, Python-shebang scripts; inline `python -c`
and scripts without a launcher stay untouched."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from guarded_sbatch.sbatch.script import parse_script
from guarded_sbatch.site.enforcement import policy_from_table, render_lua_policy, training_reason
from test_site_helpers import PLUGINS, lua_interpreter

TRAINING = {
    "srun_exact": "#!/bin/bash\nsrun --exact -n 2 python train.py\n",
    "mpirun_np": "#!/bin/bash\nmpirun -np 4 python train.py --lr 0.1\n",
    "timeout": "#!/bin/bash\ntimeout 1h python3 train.py\n",
    "singularity": "#!/bin/bash\nsingularity exec --nv img.sif torchrun --nproc_per_node 8 train.py\n",
    "apptainer_accelerate": "#!/bin/bash\napptainer exec img.sif accelerate launch train.py\n",
    "shebang": "#!/usr/bin/env python3\nimport torch\n",
    "shebang_path": "#!/opt/conda/bin/python3.11\nprint('train')\n",
}
NOT_TRAINING = {
    "srun_hostname": "#!/bin/bash\nsrun --exact -n 2 hostname\n",
    "timeout_inline": "#!/bin/bash\ntimeout 10 python -c 'print(1)'\n",
    "shell": "#!/bin/bash\necho python is great\n",
    "container_exempt": "#!/bin/bash\nsingularity exec img.sif python -m pip install x\n",
}


def _lua_reasons(tmp_path: Path, scripts: dict[str, Path]) -> dict[str, str]:
    lua = lua_interpreter()
    plugin_dir = tmp_path / "plugins"
    plugin_dir.mkdir()
    shutil.copy(PLUGINS / "guarded_sbatch_lib.lua", plugin_dir)
    (plugin_dir / "guarded_sbatch_policy.lua").write_text(render_lua_policy(policy_from_table({}, "test")))
    runner = tmp_path / "run.lua"
    runner.write_text('local lib = dofile(arg[1] .. "/guarded_sbatch_lib.lua")\nlocal policy = lib.load_policy(arg[1])\n'
                      'for i = 2, #arg do local f = io.open(arg[i], "rb") local s = f:read("*a") f:close()\n'
                      '  print(tostring(lib.training_line(s, policy))) end\n')
    names = sorted(scripts)
    out = subprocess.run([lua, str(runner), str(plugin_dir), *(str(scripts[n]) for n in names)], capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return dict(zip(names, out.stdout.splitlines(), strict=True))


@pytest.fixture
def written(tmp_path: Path) -> dict[str, Path]:
    paths = {}
    for name, body in {**TRAINING, **NOT_TRAINING}.items():
        path = tmp_path / f"{name}.sh"
        path.write_text(body)
        paths[name] = path
    return paths


def test_python_and_lua_agree_on_the_forms_once_missed(tmp_path: Path, written: dict[str, Path]) -> None:
    policy = policy_from_table({}, "test")
    lua = _lua_reasons(tmp_path, written)
    for name, path in written.items():
        python = training_reason(parse_script(path), policy)
        assert lua[name] == (python or "nil"), name
        if name in TRAINING:
            assert python is not None and python.startswith("line "), name
        else:
            assert python is None, name
