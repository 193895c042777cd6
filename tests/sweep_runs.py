"""A sweep launched the everyday way: several runs of real trainers started from ONE project folder within a
second (a shell loop of `guarded-sbatch -J NAME job.sh --config configs/NAME.yaml ...`), each in the layout its
framework picks by default:
- Lightning (`Trainer(default_root_dir=runs/<name>)`, its default TensorBoard logger): `runs/<name>/lightning_logs/
  version_N/events...`, the folder named by the config key `root_dir`, which no source kind knows;
- the HF Trainer with its default `logging_dir`: `outputs/<name>/runs/<date>_<host>/events...`;
- a bare `SummaryWriter()`: `runs/<date>_<host>/events...`, ONE folder for every run started in that second.
Each run's files are found by what its processes write (the pid in the event file's name, the files they hold
open), never by a key's name."""

from __future__ import annotations

import subprocess
import sys
import uuid
from dataclasses import dataclass, replace
from pathlib import Path

from e2e_helpers import REPO, Project, make_project, submitted_job_id


@dataclass(frozen=True)
class Kind:
    name: str  # "lightning" | "hf" | "summarywriter"
    example: str  # its folder under examples/
    config: str  # the example's config, copied per run
    healthy: tuple[str, ...]
    broken: tuple[str, ...]
    tb_folder: str  # a regex the judged TensorBoard folder (the report's "- Run: ... — FOLDER") matches; {name}: the run
    key: str = ""  # Lightning: the config key naming runs/<name>


LIGHTNING = Kind("lightning", "lightning_tiny", "synthetic-tanh-lightning-tb.yaml",
                 healthy=("--max-steps", "200", "--step-seconds", "0.05"),
                 broken=("--max-steps", "400", "--nan-at", "40", "--step-seconds", "0.1"),
                 tb_folder=r"/runs/{name}(/lightning_logs/version_0)?$", key="root_dir")
# the same, its folder named by a key nobody knows: found by the pid in its event files' names alone
LIGHTNING_UNNAMED = replace(LIGHTNING, key="trial_folder", tb_folder=r"/runs/{name}/lightning_logs/version_0$")
HF = Kind("hf", "hf_trainer", "tiny-gpt2.yaml", healthy=("--max-steps", "60", "--step-seconds", "0.05"),
          broken=("--max-steps", "300", "--nan-at", "20", "--step-seconds", "0.1"),
          tb_folder=r"/outputs/{name}(/runs/[A-Z][a-z]{{2}}\d{{2}}_\d{{2}}-\d{{2}}-\d{{2}}_[^/]+)?$")
SUMMARY_WRITER = Kind("summarywriter", "summarywriter_loop", "synthetic-tanh-torch.yaml",
                      healthy=("--steps", "200", "--step-seconds", "0.05"),
                      broken=("--steps", "600", "--nan-at", "40", "--step-seconds", "0.1"),
                      tb_folder=r"/runs/[A-Z][a-z]{{2}}\d{{2}}_\d{{2}}-\d{{2}}-\d{{2}}_[^/]+$")
KINDS = {kind.name: kind for kind in (LIGHTNING, HF, SUMMARY_WRITER)}


@dataclass(frozen=True)
class Planned:
    kind: Kind
    name: str
    broken: bool


@dataclass
class Launched:
    planned: Planned
    job_id: str
    record: dict


def sweep_project(tmp_path: Path, kinds: list[Kind]) -> Project:
    """One folder holding each kind's trainer (`<kind>_train.py`) and job script (`<kind>.sh`)."""
    base = make_project(tmp_path)
    root = tmp_path / "sweep"
    (root / "configs").mkdir(parents=True)
    for kind in kinds:
        source = (REPO / "examples" / kind.example / "train.py").read_text(encoding="utf-8")
        if kind.key:  # the folder named by the kind's own key (`root_dir`, as in the report that asked for this)
            source = source.replace('config.get("default_root_dir", ".")', f'config.get("{kind.key}", ".")')
        (root / f"{kind.name}_train.py").write_text(source, encoding="utf-8")
        (root / f"{kind.name}.sh").write_text(
            "#!/bin/bash\n#SBATCH --ntasks=1\n#SBATCH --cpus-per-task=1\n#SBATCH --mem=1G\n#SBATCH --time=00:15:00\n"
            f'set -euo pipefail\ncd "${{SLURM_SUBMIT_DIR:-.}}"\npython {kind.name}_train.py "$@"\n', encoding="utf-8")
    env = {**base.env, "GUARDED_SBATCH_STATE_DIR": str(tmp_path / "state"), "WANDB_MODE": "offline"}
    return Project(root, env, "sweep")


def plan(project: Project, counts: dict[str, int], kinds: dict[str, Kind] | None = None) -> list[Planned]:
    """`counts[kind]` runs of each kind, the first of each broken; each gets its own config (copied from the
    example's, with its own output folder where the trainer takes one from the config)."""
    planned = []
    tag = uuid.uuid4().hex[:4]
    for kind_name, count in counts.items():
        kind = (kinds or KINDS)[kind_name]
        for index in range(count):
            name = f"{kind.name}-{tag}-{index}"
            text = (REPO / "examples" / kind.example / "configs" / kind.config).read_text(encoding="utf-8")
            lines = [line for line in text.splitlines() if not line.startswith(("default_root_dir:", "output_dir:",
                                                                                 "report_to:"))]
            if kind.key:
                lines.append(f"{kind.key}: runs/{name}")
            elif kind is HF:
                lines += [f"output_dir: outputs/{name}", "report_to: [tensorboard]"]
            (project.root / "configs" / f"{name}.yaml").write_text("\n".join(lines) + "\n", encoding="utf-8")
            planned.append(Planned(kind, name, broken=index == 0))
    return planned


def launch_all(project: Project, planned: list[Planned], *, backend: str | None) -> list[Launched]:
    """Every run's `guarded-sbatch` started at once (within a second), as a loop with `&` would."""
    env = dict(project.env)
    env.pop("GUARDED_SBATCH_BACKEND", None)
    if backend is not None:
        env["GUARDED_SBATCH_BACKEND"] = backend
    started = []
    for run in planned:
        args = [f"{run.kind.name}.sh", "--config", f"configs/{run.name}.yaml",
                *(run.kind.broken if run.broken else run.kind.healthy)]
        started.append(subprocess.Popen([sys.executable, "-m", "guarded_sbatch", "-J", run.name, *args],
                                        cwd=project.root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True, stdin=subprocess.DEVNULL))
    launched = []
    for run, process in zip(planned, started):
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, f"{run.name}: exit {process.returncode}\n{out}\n{err}"
        job_id = submitted_job_id(out)
        launched.append(Launched(run, job_id, project.run_record(job_id)))
    return launched

