"""The cleanup plan and its execution on real files and stores, without jobs (fast)."""

from __future__ import annotations

import io
import sqlite3
import time
from pathlib import Path

import pytest

from guarded_sbatch.actions.cleanup import execute_cleanup, plan_cleanup, wandb_run_folder
from guarded_sbatch.core.errors import UsageError
from guarded_sbatch.cli.kill_restart import confirm, parse_lifecycle_args, restart_launch_argv
from guarded_sbatch.records.registry import RunRecord, create_run, find_run
from guarded_sbatch.sources.run_sources import RunSources, SourceSpec, WriterIdentity

# the W&B run "abc" the launch gave the job, as its record keeps it
WANDB_ABC = RunSources(specs=[SourceSpec("wandb", "abc", "guarded-sbatch", WriterIdentity(run_id="abc"))]).to_json()

# The columns of MLflow's `runs` table that matter here (mlflow/store/tracking/dbmodels/models.py).
MLFLOW_RUNS_TABLE = """CREATE TABLE runs (run_uuid VARCHAR(32) PRIMARY KEY, name VARCHAR(250), status VARCHAR(9),
    start_time BIGINT, end_time BIGINT, deleted_time BIGINT, lifecycle_stage VARCHAR(20), experiment_id INTEGER)"""


@pytest.fixture(autouse=True)
def isolated_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GUARDED_SBATCH_STATE_DIR", str(tmp_path / "state"))


def make_record(tmp_path: Path, **values: object) -> RunRecord:
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    return create_run("coco-resnet50-bs256", "local", "", submit_dir=str(project), **values)


def test_the_plan_lists_every_step_in_the_fixed_order(tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    (scratch / "ckpt").mkdir(parents=True)
    record = make_record(tmp_path, checkpoint_dir=str(scratch / "ckpt"), artifact_dir="s3://bucket/coco-resnet50",
                         wandb_paths=[str(tmp_path / "project/wandb/run-20260101_1200-abc/run-abc.wandb")],
                         tracker={"kind": "wandb", "run_path": "team/coco/abc"}, sources=WANDB_ABC)
    record.job_id, record.sidecar_id = "41", "42"
    plan = plan_cleanup(record, (scratch,), homes=set())
    assert [step.name for step in plan.steps] == ["stop", "checkpoint", "artifact", "tracker", "scheduler"]
    text = plan.render()
    assert text.index("local checkpoint folder") < text.index("remote artifact folder") < text.index("tracker run")
    assert "delete W&B run team/coco/abc through the W&B API" in text
    assert "s3://bucket/coco-resnet50: a remote URL" in text
    # the W&B run folder lies in the submit folder, which is outside the configured run roots
    assert [a.refused for a in plan.steps[3].actions if a.kind == "delete-path"][0].endswith("refused")
    assert plan_cleanup(record, (scratch,), homes=set()) == plan  # a pure function of record and roots


def test_wandb_run_folder_is_taken_only_from_a_run_folder() -> None:
    assert wandb_run_folder("/p/wandb/run-20260101_1200-abc/run-abc.wandb") == "/p/wandb/run-20260101_1200-abc"
    assert wandb_run_folder("/p/wandb/offline-run-20260101_1200-abc") == "/p/wandb/offline-run-20260101_1200-abc"
    assert wandb_run_folder("/p/wandb") is None


def test_mlflow_sqlite_run_is_marked_deleted(tmp_path: Path) -> None:
    store = tmp_path / "project" / "mlflow.db"
    store.parent.mkdir()
    with sqlite3.connect(store) as db:
        db.execute(MLFLOW_RUNS_TABLE)
        db.execute("INSERT INTO runs VALUES ('aaa', 'ours', 'RUNNING', 1, NULL, NULL, 'active', 0)")
        db.execute("INSERT INTO runs VALUES ('bbb', 'theirs', 'RUNNING', 1, NULL, NULL, 'active', 0)")
    db.close()
    record = make_record(tmp_path, tracker={"kind": "mlflow", "tracking_uri": f"sqlite:///{store}", "run_id": "aaa"})
    outcomes = execute_cleanup(plan_cleanup(record, ()), record, scheduler=None)
    assert [o.ok for o in outcomes] == [True] and "marked deleted" in outcomes[0].detail
    with sqlite3.connect(store) as db:
        rows = dict(db.execute("SELECT run_uuid, lifecycle_stage FROM runs"))
        deleted_time = db.execute("SELECT deleted_time FROM runs WHERE run_uuid = 'aaa'").fetchone()[0]
    db.close()
    assert rows == {"aaa": "deleted", "bbb": "active"}
    assert abs(deleted_time / 1000 - time.time()) < 60


def test_mlflow_file_store_run_is_marked_deleted(tmp_path: Path) -> None:
    run = tmp_path / "project" / "mlruns" / "0" / "ccc"
    run.mkdir(parents=True)
    (run / "meta.yaml").write_text("run_id: ccc\nlifecycle_stage: active\nstatus: 1\n")
    record = make_record(tmp_path, tracker={"kind": "mlflow", "run_id": "ccc"})  # default store: ./mlruns
    outcomes = execute_cleanup(plan_cleanup(record, ()), record, scheduler=None)
    assert outcomes[0].ok
    meta = (run / "meta.yaml").read_text()
    assert "lifecycle_stage: deleted" in meta and "deleted_time:" in meta and "status: 1" in meta


def test_wandb_api_deletion_is_time_limited_and_falls_back_to_the_local_folder(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # nothing listens there: unreachable at once
    folder = tmp_path / "project" / "wandb" / "offline-run-20260101_1200-abc"
    folder.mkdir(parents=True)
    (folder / "run-abc.wandb").write_bytes(b":W&B\xbe\xe1\x00")
    record = make_record(tmp_path, wandb_paths=[str(folder / "run-abc.wandb")],
                         tracker={"kind": "wandb", "run_path": "team/coco/abc"}, sources=WANDB_ABC)
    started = time.monotonic()
    outcomes = execute_cleanup(plan_cleanup(record, ()), record, scheduler=None, wandb_timeout_s=20)
    assert time.monotonic() - started < 20
    assert [o.action.kind for o in outcomes] == ["wandb-api-delete", "delete-path"]
    assert "unreachable" in outcomes[0].detail
    assert outcomes[1].ok and not folder.exists()
    assert (tmp_path / "project" / "wandb").is_dir()  # only the run's own folder


def test_confirmation_needs_a_typed_yes_on_a_terminal() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    err = io.StringIO()
    confirm("Delete?", assume_yes=False, stdin=Terminal("yes\n"), err=err)
    assert "Type yes" in err.getvalue()
    with pytest.raises(UsageError, match="not confirmed"):
        confirm("Delete?", assume_yes=False, stdin=Terminal("y\n"), err=io.StringIO())
    with pytest.raises(UsageError, match="no terminal"):
        confirm("Delete?", assume_yes=False, stdin=io.StringIO("yes\n"), err=io.StringIO())
    confirm("Delete?", assume_yes=True, stdin=io.StringIO(""), err=io.StringIO())


def test_lifecycle_arguments() -> None:
    args = parse_lifecycle_args(["coco-run", "--yes", "--guard-waive", "eta=known", "--guard-backend=local"],
                                command="restart", allow_guard_options=True)
    assert (args.run, args.yes, args.guard_options) == ("coco-run", True, ("--guard-waive", "eta=known", "--guard-backend=local"))
    with pytest.raises(UsageError, match="unknown option --guard-waive"):
        parse_lifecycle_args(["coco-run", "--guard-waive=x=y"], command="kill", allow_guard_options=False)
    with pytest.raises(UsageError, match="name the run"):
        parse_lifecycle_args(["--yes"], command="kill", allow_guard_options=False)


def test_restart_words_carry_the_recorded_settings_and_let_the_user_override(tmp_path: Path) -> None:
    record = make_record(tmp_path, script="train.sh", sbatch_options=["-p", "gpu"], script_args=["--lr", "3e-4"],
                         guard_words=["--guard-checkpoint-dir=/scratch/ckpt", "--guard-tb=/p/runs",
                                      "--guard-waive=eta=old", "--guard-waive=config-diff=kept"])
    words = restart_launch_argv(record, ("--guard-waive", "eta=new reason", "--guard-tb=/p/other"))
    assert words[-6:] == ["--guard-restart", "-p", "gpu", "train.sh", "--lr", "3e-4"]
    assert "--guard-checkpoint-dir=/scratch/ckpt" in words
    assert "--guard-waive=config-diff=kept" in words and "--guard-waive=eta=old" not in words
    assert "--guard-tb=/p/runs" not in words and "--guard-tb=/p/other" in words
    assert find_run("coco-resnet50-bs256").run_id == record.run_id


def test_the_registry_never_stores_secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    token = "hf_" + "Zq9" * 12
    monkeypatch.setenv("HF_TOKEN", token)
    record = make_record(tmp_path, script="train.sh", script_args=["--hf-token", token])
    text = (record.folder / "run.json").read_text()
    assert token not in text and "[redacted]" in text
    with pytest.raises(UsageError, match="secret on its command line"):
        restart_launch_argv(find_run(record.run_id), ())
