"""Secrets never reach what the tool writes: a run launched with tokens in its environment and on its
command line, stopped by its sidecar, leaves no token in the state folder, evidence, notes or sidecar output."""

from __future__ import annotations

import os
import sys
from pathlib import Path


from e2e_helpers import Project, submitted_job_id, wait_for

WANDB_KEY = "5eed" * 10  # 40 hex characters, the shape of a W&B API key
HF_TOKEN = "hf_SecretTokenForGuardedSbatchTests0123"
RUN_NAME = "cifar10-resnet18-bs128-lr0.1"

TRAINER = """\
import sys, time
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter
print("logging in with token", sys.argv[1], flush=True)
writer = EventFileWriter("runs/cifar10")
for step in range(400):
    loss = 2.3 * 0.98 ** step if step < 25 else float("nan")
    value = summary_pb2.Summary.Value(tag="train/loss", simple_value=loss)
    writer.add_event(event_pb2.Event(wall_time=time.time(), step=step, summary=summary_pb2.Summary(value=[value])))
    writer.flush()
    print(f"step {step} loss {loss}", flush=True)
    time.sleep(0.1)
"""

SCRIPT = f"""#!/bin/bash
#SBATCH --job-name={RUN_NAME}
#SBATCH --output=train-%j.out
echo "HF_TOKEN=$HF_TOKEN WANDB_API_KEY=$WANDB_API_KEY"
"{sys.executable}" trainer.py "$2"
"""


def test_no_token_in_anything_the_tool_wrote(tmp_path: Path) -> None:
    project_dir = tmp_path / "project"
    (project_dir / "runs").mkdir(parents=True)
    (project_dir / "trainer.py").write_text(TRAINER)
    (project_dir / "train.sh").write_text(SCRIPT)
    config = tmp_path / "user-config.toml"
    config.write_text("[sidecar]\nfast_interval_seconds = 1.0\njob_poll_seconds = 5.0\n")
    notes = tmp_path / "notes.md"
    state = tmp_path / "state"
    env = {**os.environ, "GUARDED_SBATCH_STATE_DIR": str(state), "GUARDED_SBATCH_USER_CONFIG": str(config),
           "WANDB_API_KEY": WANDB_KEY, "HF_TOKEN": HF_TOKEN, "WANDB_PROJECT": "cifar10-baselines",
           "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
    env.pop("GUARDED_SBATCH_SITE_CONFIG", None)
    project = Project(project_dir, env)

    launched = project.cli("--guard-backend", "local", "--guard-waive", "config-diff=secrets test",
                           "--guard-tb", "runs/cifar10", "--guard-notes", str(notes),
                           "train.sh", "--hf-token", HF_TOKEN, check=True)
    job_id = submitted_job_id(launched.stdout)
    wait_for(lambda: "FINAL_SUMMARY" in project.sidecar_output(job_id), 90, what="the sidecar's STOP")
    output = project.sidecar_output(job_id)
    assert "Decision: STOP" in output
    # the trainer really did print the tokens, so the evidence had something to leak
    job_log = (project_dir / f"train-{job_id}.out").read_text()
    assert HF_TOKEN in job_log and WANDB_KEY in job_log
    assert notes.is_file()

    written = [p for p in state.rglob("*") if p.is_file()] + [notes]
    assert any(p.parent.name == "evidence" for p in written)
    # The local backend's job spec is its job queue, like slurmctld's saved job scripts: it must keep the
    # command line to run the job. It stays private to the user; nothing else may hold a token.
    job_specs = [p for p in written if p.name == "spec.json" and p.parent.parent.name == "local-jobs"]
    assert job_specs and all(p.stat().st_mode & 0o077 == 0 for p in job_specs)
    written = [p for p in written if p not in job_specs]
    for secret in (HF_TOKEN, WANDB_KEY):
        leaks = [str(p) for p in written if secret.encode() in p.read_bytes()]
        assert leaks == [], f"token found in {leaks}"
    assert HF_TOKEN not in launched.stdout and WANDB_KEY not in launched.stdout


def test_the_preflight_report_shows_no_token(tmp_path: Path) -> None:
    project_dir = tmp_path / "project"
    (project_dir / "runs").mkdir(parents=True)
    (project_dir / "trainer.py").write_text(TRAINER)
    (project_dir / "train.sh").write_text(SCRIPT)
    env = {**os.environ, "GUARDED_SBATCH_STATE_DIR": str(tmp_path / "state"), "HF_TOKEN": HF_TOKEN}
    env.pop("GUARDED_SBATCH_SITE_CONFIG", None)
    checked = Project(project_dir, env).cli("check", "--guard-backend", "local", "--guard-waive", "config-diff=test",
                                            "train.sh", "--hf-token", HF_TOKEN)
    assert checked.returncode == 0, checked.stderr  # a clean launch: the report shows the launch command
    assert HF_TOKEN not in checked.stderr
