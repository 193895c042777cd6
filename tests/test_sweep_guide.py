"""The user guide's "Sweeps" examples, taken from docs/user-guide.md and run as written on the dev Slurm, each with one
broken run among healthy ones: an array, a loop of launches, GuardedExecutor.map_array, a W&B sweep agent (W&B's own
`wandb agent`, asking a local sweep controller, tests/wandb_local_sweep.py, instead of a W&B server; its runs log
offline); the Hydra ones are the app and command tests/test_hydra_sweep.py runs."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import require
from e2e_helpers import REPO, Project, make_project, submitted_job_id, wait_for
from guarded_sbatch.scheduler.slurm import SlurmScheduler
from wandb_local_sweep import LocalSweep, serve, slurmctld_address

GUIDE = REPO / "docs" / "user-guide.md"
TERMINAL = ("COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "OUT_OF_MEMORY")


def examples() -> dict[str, str]:
    """Each `<!-- example: NAME -->` code block of the guide, by NAME."""
    text = GUIDE.read_text(encoding="utf-8")
    return {m.group(1): m.group(2) for m in re.finditer(r"<!-- example: (.+?) -->\n```\w*\n(.*?)```", text, re.DOTALL)}


def _shell(project: Project, command: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", command], cwd=project.root, env=project.env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def _runs_ended(project: Project, count: int, timeout: float = 240) -> dict[str, dict[str, object]]:
    """status --json's rows by run name (or job id for an array's tasks), once `count` runs have all ended."""
    def ended() -> list[dict[str, object]] | None:
        done = project.cli("status", "--json", timeout=60, check=True)
        runs = list(json.loads(done.stdout)["runs"])
        return runs if len(runs) == count and all(r["state"] in TERMINAL for r in runs) else None

    runs = wait_for(ended, timeout, 2.0, what=f"{count} runs to end")
    return {str(r["run"]) if len({r["run"] for r in runs}) == count else str(r["job_id"]): r for r in runs}


def test_the_guide_has_each_sweep_example() -> None:
    found = examples()
    assert {"array.sh", "array command", "train.sh", "loop command", "hydra config", "hydra command", "map_array.py",
            "sweep.yaml", "check-sweep command", "agent.sh", "agent command"} <= set(found), sorted(found)
    assert found["loop command"].strip() == "for lr in 1e-3 3e-4; do guarded-sbatch train.sh --lr $lr; done"
    hydra_config = (REPO / "examples" / "hydra_sweep" / "conf" / "config.yaml").read_text()
    assert found["hydra config"] in hydra_config  # the app's own config, as the guide shows it
    hydra_test = (REPO / "tests" / "test_hydra_sweep.py").read_text()
    assert found["hydra command"].strip() == "python train.py -m hydra/launcher=guarded_submitit_slurm lr=0.01,0.1,100"
    assert '"train.py", "-m", f"hydra/launcher={launcher}", "lr=0.01,0.1,100"' in hydra_test


@pytest.mark.slurm
def test_the_guides_loop_gives_each_launch_its_own_run(tmp_path: Path, slurm_cluster: None) -> None:
    project = make_project(tmp_path, fast_interval=1.0, job_poll=5.0)
    (project.root / "train.sh").write_text(examples()["train.sh"])
    loop = _shell(project, examples()["loop command"])
    assert loop.returncode == 0, loop.stderr
    assert loop.stdout.count("Submitted batch job ") == 2, loop.stdout
    broken = project.cli("train.sh", "--lr", "5e-2", "--diverge-at", "100", timeout=120)  # the broken one
    assert broken.returncode == 0, broken.stderr
    runs = _runs_ended(project, 3)
    name = "synthetic-tanh-mlp-bs64"
    assert sorted(runs) == [f"{name}-lr1e-3", f"{name}-lr3e-4", f"{name}-lr5e-2"], runs
    assert [runs[f"{name}-lr{lr}"]["state"] for lr in ("1e-3", "3e-4")] == ["COMPLETED", "COMPLETED"], runs
    stopped = runs[f"{name}-lr5e-2"]
    assert (stopped["state"], stopped["decision"], stopped["stopped_by"]) == ("CANCELLED", "STOP", "guard"), stopped


@pytest.mark.slurm
def test_the_guides_array_gives_each_task_its_run(tmp_path: Path, slurm_cluster: None) -> None:
    project = make_project(tmp_path, fast_interval=1.0, job_poll=5.0)
    (project.root / "array.sh").write_text(examples()["array.sh"])
    launched = _shell(project, examples()["array command"])
    assert launched.returncode == 0, launched.stderr
    runs = _runs_ended(project, 3)
    tasks = {job.rsplit("_", 1)[1]: run for job, run in runs.items()}
    assert [tasks[t]["state"] for t in ("0", "1")] == ["COMPLETED", "COMPLETED"], runs
    assert (tasks["2"]["state"], tasks["2"]["decision"], tasks["2"]["stopped_by"]) == ("CANCELLED", "STOP", "guard")
    assert {run["run"] for run in runs.values()} == {"synthetic-tanh-mlp-bs64-lr-sweep"}


@pytest.mark.slurm
def test_the_guides_map_array_stops_the_broken_call_alone(tmp_path: Path, slurm_cluster: None) -> None:
    project = make_project(tmp_path, fast_interval=1.0, job_poll=5.0)
    (project.root / "map_array.py").write_text(examples()["map_array.py"])
    done = subprocess.run([sys.executable, "map_array.py"], cwd=project.root, env=project.env, capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == ["lr 0.01", "lr 0.05", "lr 10.0"], done.stdout
    assert lines[0].startswith("lr 0.01: loss ") and lines[1].startswith("lr 0.05: loss "), done.stdout
    assert "was stopped by its guard (STOP, " in lines[2] and "its processes ended at " in lines[2], done.stdout


@pytest.mark.slurm
@pytest.mark.waits
def test_the_guides_wandb_agent_guards_each_run_and_stops_the_broken_one(tmp_path: Path, slurm_cluster: None) -> None:
    require(importlib.util.find_spec("wandb") is not None, "wandb installed")
    found = examples()
    project = make_project(tmp_path, fast_interval=1.0, job_poll=5.0)
    (project.root / "sweep.yaml").write_text(found["sweep.yaml"])
    (project.root / "agent.sh").write_text(found["agent.sh"])
    checked = _shell(project, found["check-sweep command"])
    assert checked.returncode == 0 and "Clear to start the sweep." in checked.stderr, checked.stderr[-2000:]

    launch = found["agent command"].strip()
    sweep_path = re.search(r"SWEEP=(\S+)", launch)
    assert sweep_path, launch
    entity, wandb_project, sweep_id = sweep_path.group(1).split("/")
    sweep = LocalSweep(entity, wandb_project, sweep_id, found["sweep.yaml"])
    server, url = serve(sweep, slurmctld_address())  # where the job reaches this machine
    try:
        project.env.update({"WANDB_BASE_URL": url, "WANDB_API_KEY": "local" * 8, "WANDB_MODE": "offline",
                            "WANDB_SILENT": "true",
                            # a loaded test machine: W&B's service answers its first request late, not never
                            "WANDB_HTTP_TIMEOUT": "120", "WANDB_X_SERVICE_WAIT": "120"})
        launched = _shell(project, launch)
        assert launched.returncode == 0, launched.stderr
        job_id = submitted_job_id(launched.stdout)
        record = project.run_record(job_id)
        scheduler = SlurmScheduler(state_dir=tmp_path / "asker")
        wait_for(lambda: scheduler.state(job_id).is_terminal, 600, 2, "the agent job to end")
        wait_for(lambda: scheduler.state(record["sidecar_id"]).is_terminal, 120, 2, "its sidecar to end")
    finally:
        server.shutdown()
    output = project.sidecar_output(job_id)
    job_log = (project.root / f"slurm-{job_id}.out").read_text(errors="replace")
    runs = {values["lr"]: run_id for run_id, values in sweep.handed}
    assert sorted(runs) == [0.01, 0.05, 3], (sweep.operations, job_log[-3000:])  # each combination, one run each
    stops = re.findall(r"stop of W&B run (\S+) done", output)
    runs_path = f"{entity}/{wandb_project}"
    assert stops == [f"{runs_path}/{runs[3]}"], output[-3000:]  # the broken run alone, by its guard
    assert output.count("- Decision: STOP") == 1, output[-3000:]
    evidence = project.state_dir / "runs" / record["run_id"] / "evidence" / runs[3] / "evidence.json"
    assert evidence.is_file(), output[-3000:]  # that W&B run's own evidence
    # the healthy runs: each read from its own W&B log, never stopped
    assert f"run-{runs[0.01]}.wandb" in output and f"— {runs_path}/{runs[0.05]}\n" in output, output[-3000:]
    assert job_log.count("training finished after") == 2 and scheduler.state(job_id).name == "COMPLETED", job_log[-2000:]
