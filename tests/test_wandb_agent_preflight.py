"""A batch script that runs W&B's sweep agent (`wandb agent ENTITY/PROJECT/SWEEP`) names its runs' W&B project: the
agent gives each run it starts WANDB_PROJECT and WANDB_ENTITY from the sweep's path (or its -p / -e), so the
monitoring check reads them there, the sweep id expanded as the job sees it (--export, the script's variables)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from cli_runner import run_cli

HEADER = "#!/bin/bash\n#SBATCH --job-name=synthetic-tanh-mlp-bs64-wandb-sweep\n#SBATCH --time=00:10:00\n"


def _monitoring(tmp_path: Path, line: str, *options: str) -> dict:
    root = tmp_path / "proj"
    root.mkdir(exist_ok=True)
    (root / "agent.sh").write_text(HEADER + line + "\n", encoding="utf-8")
    env = {**os.environ, "GUARDED_SBATCH_STATE_DIR": str(tmp_path / "state"), "GUARDED_SBATCH_BACKEND": "local",
           "WANDB_API_KEY": "k" * 40, "WANDB_MODE": "offline"}
    for name in ("WANDB_PROJECT", "WANDB_ENTITY"):
        env.pop(name, None)
    done = run_cli(["check", "--json", *options, "agent.sh"], env=env, cwd=root)
    return next(c for c in json.loads(done.stdout)["checks"] if c["name"] == "monitoring")


@pytest.mark.parametrize(("line", "options", "project", "entity"), [
    ('wandb agent --count 8 "$SWEEP"', ["--export=ALL,SWEEP=me/proj/abc123"], "proj", "me"),
    ("SWEEP=lab/vision/x1y2\nexec wandb agent $SWEEP", [], "vision", "lab"),
    ("wandb agent -p other -e team abc123", [], "other", "team"),
])
def test_the_agents_sweep_path_names_the_runs_project(tmp_path: Path, line: str, options: list[str], project: str,
                                                      entity: str) -> None:
    found = _monitoring(tmp_path, line, *options)
    assert found["status"] != "failed" and f"W&B project {project}, entity {entity}" in found["finding"], found


def test_a_sweep_id_alone_names_no_project_and_the_check_says_so(tmp_path: Path) -> None:
    found = _monitoring(tmp_path, "wandb agent abc123")
    assert found["status"] == "failed" and "W&B project not set" in found["finding"], found
