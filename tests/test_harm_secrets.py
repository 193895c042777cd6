"""Planted secrets of every shape (URL credentials in env vars, --*key*=/--*token*=/--*password*=/
--*secret*= script arguments, --export lists, --comment, the same in the job's log): none of them
appears in any file the product writes (state folder, local job spec, evidence, notes, sidecar output)
or in anything it prints."""

from __future__ import annotations

import json
from pathlib import Path

from e2e_helpers import make_project, submitted_job_id, wait_for
from guarded_sbatch.core.redact import redact, redact_args
from guarded_sbatch.scheduler.local import LocalScheduler

SECRETS = {
    "url_env": "Pw1UrlEnvS3cret",
    "mlflow_uri": "Pw2MlflowS3cret",
    "wandb_key": "Sec3WandbKeyValue",
    "api_token": "Sec4ApiTokenValue",
    "db_password": "Sec5DbPasswordValue",
    "client_secret": "Sec6ClientSecretVal",
    "export": "Sec7ExportedValue",
    "comment": "Sec8CommentToken",
    "space_key": "Sec9SpaceKeyValue",
}

SCRIPT = """#!/bin/bash
#SBATCH --job-name=secret-plant-run-a
#SBATCH --time=00:05:00
#SBATCH --mem=400M
cd "${SLURM_SUBMIT_DIR:-.}"
for i in $(seq 1 400); do
  if [ "$i" -lt 30 ]; then v="1.$((99 - i))"; else v=nan; fi
  echo "step $i loss=$v db=$DATABASE_URL tracking=$MLFLOW_TRACKING_URI args: $*" >> train.log
  sleep 0.1
done
"""


def test_planted_secrets_never_reach_a_file_or_the_terminal(tmp_path: Path) -> None:
    project = make_project(tmp_path, fast_interval=2.0)
    s = SECRETS
    project.env["DATABASE_URL"] = f"postgres://alice:{s['url_env']}@db.example:5432/runs"
    project.env["MLFLOW_TRACKING_URI"] = f"https://bob:{s['mlflow_uri']}@mlflow.example"
    (project.root / "secret.sh").write_text(SCRIPT)
    notes = tmp_path / "NOTES.md"
    result = project.cli(
        "--guard-backend",
        "local",
        "--guard-log",
        "train.log",
        "--guard-notes",
        str(notes),
        "--guard-waive",
        "config-diff=synthetic",
        f"--export=ALL,WANDB_API_KEY={s['export']}",
        f"--comment=token={s['comment']}",
        "secret.sh",
        f"--wandb-key={s['wandb_key']}",
        f"--api-token={s['api_token']}",
        f"--db-password={s['db_password']}",
        f"--client-secret={s['client_secret']}",
        "--api-key",
        s["space_key"],
    )
    assert result.returncode == 0, result.stderr
    job_id = submitted_job_id(result.stdout)
    record = project.run_record(job_id)
    scheduler = LocalScheduler(project.state_dir / "local-jobs")
    try:
        wait_for(lambda: scheduler.state(record["sidecar_id"]).is_terminal, 120, 1, "sidecar to end")
        assert "Decision: STOP" in project.sidecar_output(job_id)
        status = project.cli("status")
        printed = result.stdout + result.stderr + status.stdout + status.stderr
        written = [p for p in [*project.state_dir.rglob("*"), notes] if p.is_file()]
        assert any(p.name == "spec.json" for p in written) and any(p.name == "evidence.json" for p in written)
        leaks = [(name, str(path)) for path in written for name, secret in s.items() if secret.encode() in path.read_bytes()]
        leaks += [(name, "printed") for name, secret in s.items() if secret in printed]
        assert leaks == []
        # the job itself got the real values (its own log is its business, not ours)
        assert s["wandb_key"] in (project.root / "train.log").read_text()
    finally:
        for job in (job_id, record["sidecar_id"]):
            try:
                scheduler.cancel(job)
            except Exception:  # noqa: BLE001
                pass


def test_every_shape_is_redacted_in_text_and_argument_lists() -> None:
    secret = "Zz9SecretShape"
    shapes = [
        f"postgres://alice:{secret}@db/x",
        f"https://{secret}@github.com/x",
        f"--wandb-key={secret}",
        f"--my_api_key={secret}",
        f"--hf-token={secret}",
        f"--db-password={secret}",
        f"--client-secret={secret}",
        f"--export=ALL,FOO={secret}",
        f"--comment=token={secret}",
        f'--comment "run {secret}"',
        f"WANDB_API_KEY={secret}",
        f'{{"password": "{secret}"}}',
        f"secret_key: {secret}",
    ]
    for shape in shapes:
        assert secret not in redact(f"x {shape} y"), shape
    for flag in ("--wandb-key", "--api-token", "--password", "--comment", "--export", "--client-secret"):
        assert secret not in json.dumps(redact_args([flag, secret]))
    assert (
        redact("--train-loss-key=loss --tokenizer=bert step 5 loss=0.3")
        == "--train-loss-key=loss --tokenizer=bert step 5 loss=0.3"
    )
