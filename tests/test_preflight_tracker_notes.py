"""The pre-flight names a tracker run it pins (a W&B run id, an MLflow tag) only for a tracker the project uses
(its program imports it, its config or environment names it); a project that uses neither hears of neither."""

from __future__ import annotations

from pathlib import Path

from preflight_tree import TRAIN_SH, build_clean_tree

PLAIN_SH = TRAIN_SH.replace("export WANDB_PROJECT=coco-detection\nexport WANDB_ENTITY=vision-lab\n", "")


def _notes(tmp_path: Path, program: str, script: str = PLAIN_SH) -> str:
    tree = build_clean_tree(tmp_path)
    tree.write("train.py", program)
    tree.write("train.sh", script)
    return "\n".join(tree.run().notes)


def test_a_project_using_neither_tracker_hears_of_neither(tmp_path: Path) -> None:
    notes = _notes(tmp_path, "import torch\n\ndef main():\n    print('step 1 loss 2.0')\n")
    assert "W&B" not in notes and "MLflow" not in notes and "WANDB_RUN_ID" not in notes
    assert "the sidecar reads this run's own" in notes


def test_each_tracker_the_program_imports_is_named(tmp_path: Path) -> None:
    notes = _notes(tmp_path / "w", "import wandb\n")
    assert "exported as WANDB_RUN_ID" in notes and "MLflow" not in notes
    notes = _notes(tmp_path / "m", "import mlflow\n")
    assert "MLflow run tagged" in notes and "W&B" not in notes


def test_an_array_of_a_project_without_wandb_says_nothing_of_wandb_runs(tmp_path: Path) -> None:
    array = PLAIN_SH.replace("#SBATCH --nodes=2\n", "#SBATCH --nodes=2\n#SBATCH --array=0-3\n")
    notes = _notes(tmp_path, "import torch\n", array)
    assert "W&B" not in notes


def test_an_export_that_keeps_the_id_from_the_job_is_said_only_for_a_tracker_in_use(tmp_path: Path) -> None:
    script = PLAIN_SH.replace("#SBATCH --nodes=2\n", "#SBATCH --nodes=2\n#SBATCH --export=NONE\n")
    assert "--export=NONE keeps WANDB_RUN_ID" in _notes(tmp_path / "w", "import wandb\n", script)
    assert "--export=NONE keeps" not in _notes(tmp_path / "n", "import torch\n", script)
