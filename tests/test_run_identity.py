"""Run identity (issue 12), piece by piece: what the launch resolves as the run's own, and how the sidecar
reads only that (real writers: tensorboard's EventFileWriter, wandb offline, mlflow)."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from e2e_helpers import make_project
from guarded_sbatch.sources.kind_mlflow import MLFLOW_TAG
from guarded_sbatch.sources.run_sources import RunSources, SourceSpec, WriterIdentity
from guarded_sbatch.sbatch.filename_pattern import expand_filename_pattern
from guarded_sbatch.sbatch.argv import split_sbatch_argv
from guarded_sbatch.sbatch.script import parse_script_text
from guarded_sbatch.launch.preflight import run_preflight
from guarded_sbatch.launch.results import CheckStatus
from guarded_sbatch.sidecar.one_shot import judge_once
from guarded_sbatch.sidecar.plan import WatchPlan
from guarded_sbatch.sidecar.source_set import SourceSet
from guarded_sbatch.sources.discovery import discover
from package_extras import tb_folders, tb_specs
from source_writers import tb_event, write_tb_events

SCRIPT = '#!/bin/bash\n#SBATCH --job-name=x\npython train.py --config c.yaml --tb "$@" --count $# --second=$2\n'


def test_script_arguments_expand_as_bash_would() -> None:
    launcher = parse_script_text(SCRIPT, Path("t.sh"), {}, ["--steps", "4000", "--logdir", "runs/a b"]).launcher
    assert launcher is not None
    words = [w.text for w in launcher.program_args]
    assert words == ["--config", "c.yaml", "--tb", "--steps", "4000", "--logdir", "runs/a b", "--count", "4",
                     "--second=4000"]
    assert launcher.overrides == {"tb": "true", "steps": "4000", "logdir": "runs/a b", "count": "4", "second": "4000"}
    assert launcher.unresolved_args == ()
    unknown = parse_script_text(SCRIPT, Path("t.sh"), {}).launcher  # arguments not known: left unresolved
    assert unknown is not None and "$@" in unknown.unresolved_args
    empty = parse_script_text(SCRIPT, Path("t.sh"), {}, []).launcher
    assert empty is not None and [w.text for w in empty.program_args][:3] == ["--config", "c.yaml", "--tb"]


def test_filename_patterns_expand_like_slurm() -> None:
    expand = expand_filename_pattern
    assert expand("slurm-%j.out", job_id="17", job_name="n", user="u") == "slurm-17.out"
    assert expand("logs/%x-%u-%A_%a-%5j-%%.out", job_id="17", job_name="n", user="u",
                  array_task="4294967294") == "logs/n-u-17_4294967294-00017-%.out"
    assert expand("o-%N.out", job_id="1", job_name="n", user="u") == "o-%N.out"  # the node: known once it runs
    assert expand("o-%N.out", job_id="1", job_name="n", user="u", node="c1") == "o-c1.out"


def _project_check(tmp_path: Path, argv: list[str], env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    from finished_runs import state_folder

    project = make_project(tmp_path, history=True)  # its baseline finished healthy: the reference, and its pace
    launch = split_sbatch_argv(argv)
    with state_folder(project.state_dir):
        return project, run_preflight(launch, _config(), None, cwd=project.root,
                                      env=env or {"PATH": os.environ["PATH"]})


def _config():  # type: ignore[no-untyped-def]
    from guarded_sbatch.core.config import Config

    return Config()


def test_the_launch_resolves_the_runs_own_folder_wandb_id_and_mlflow_tag(tmp_path: Path) -> None:
    project, report = _project_check(tmp_path, ["train.sh", "--steps", "4000", "--logdir", "runs/mine"])
    plan = report.details["source_plan"]
    assert plan.sources.places("tensorboard") == tb_specs(project.root / "runs" / "mine", origin="--logdir")
    wandb, mlflow = plan.sources.pinned("wandb"), plan.sources.pinned("mlflow")
    assert wandb is not None and mlflow is not None
    assert len(plan.env["WANDB_RUN_ID"]) == 8 and plan.env["WANDB_RUN_ID"] == wandb.writer.run_id == wandb.locator
    assert plan.env["WANDB_RESUME"] == "allow"
    assert json.loads(plan.env["MLFLOW_RUN_CONTEXT"]) == {MLFLOW_TAG: mlflow.writer.tag}
    sources = plan.for_job("42", since=123.0)
    assert sources.stdout == str(project.root / "slurm-42.out") and sources.since == 123.0
    plan.sources.specs[:1] = tb_specs(project.root / "runs" / "$SLURM_JOB_ID")
    assert tb_folders(plan.for_job("42")) == [str(project.root / "runs" / "42")]  # filled in once the id is known
    eta = next(r for r in report.results if r.name == "eta")
    assert "steps=4000 / steps_per_epoch=200" in eta.evidence[0]  # the ETA follows --steps given to the script
    env = {"PATH": os.environ["PATH"], "WANDB_RUN_ID": "mine1234"}
    _, user_set = _project_check(tmp_path / "b", ["train.sh"], env=env)
    plan = user_set.details["source_plan"]
    pinned = plan.sources.pinned("wandb")
    assert pinned is not None and pinned.writer.run_id == "mine1234" and "WANDB_RUN_ID" not in plan.env  # kept
    assert tb_folders(plan.sources) == [str(tmp_path / "b" / "project" / "runs" / "synthetic-tanh-mlp-bs64-lr5e-2")]


def test_transformers_tensorboard_folder_from_the_environment_is_the_runs_own(tmp_path: Path) -> None:
    """transformers 5 takes the HF Trainer's TensorBoard folder from $TENSORBOARD_LOGGING_DIR (exported by the
    user or by the script itself), with no date/host subfolder: that folder is the run's."""
    env = {"PATH": os.environ["PATH"], "TENSORBOARD_LOGGING_DIR": "tb/hf-run"}
    project, report = _project_check(tmp_path / "a", ["train.sh"], env=env)
    plan = report.details["source_plan"]
    assert tb_specs(project.root / "tb" / "hf-run", origin="$TENSORBOARD_LOGGING_DIR")[0] in plan.sources.specs
    project = make_project(tmp_path / "b")
    script = project.root / "train.sh"
    text = script.read_text()
    script.write_text(text.replace("\npython", "\nexport TENSORBOARD_LOGGING_DIR=runs/exported\npython", 1))
    report = run_preflight(split_sbatch_argv(["train.sh"]), _config(), None, cwd=project.root,
                           env={"PATH": os.environ["PATH"]})
    assert str(project.root / "runs" / "exported") in tb_folders(report.details["source_plan"].sources), text


def test_the_monitoring_check_reports_what_the_launch_resolved(tmp_path: Path) -> None:
    """One report never says "no tracker found" beside "the sidecar reads this run's own: TensorBoard ...":
    the check reads the launch's source plan (sources/kind_launch.py's keys), not signs of its own alone."""
    project = make_project(tmp_path)
    (project.root / "train.py").write_text("print('step 1 loss 0.5')\n")  # no tracker in the code
    shutil.rmtree(project.root / "runs")
    config = project.root / "configs" / "synthetic-tanh-mlp.yaml"
    text = config.read_text()

    def check(config_text: str) -> tuple[str, list[str], str]:
        config.write_text(config_text)
        report = run_preflight(split_sbatch_argv(["train.sh"]), _config(), None, cwd=project.root,
                               env={"PATH": os.environ["PATH"]})
        monitoring = next(r for r in report.results if r.name == "monitoring")
        return monitoring.finding, list(monitoring.evidence), next(n for n in report.notes if "sidecar reads" in n)

    folder = project.root / "runs" / "synthetic-tanh-mlp-bs64-lr5e-2"
    finding, evidence, note = check(text)  # logdir: a TensorBoard key names the run's folder
    assert finding == "tracker tensorboard found" and f"TensorBoard {folder} (config key logdir)" in note
    assert evidence == [f"tensorboard: config key logdir names its folder {folder} — log_dir={folder}"]
    finding, _, note = check(text.replace("logdir: runs/synthetic-tanh-mlp-bs64-lr5e-2", "output_dir: out"))
    assert f"TensorBoard {project.root / 'out'} (config key output_dir)" in note  # looked for under the output folder
    assert finding.startswith("no tracker named in the program or its config") and "no tracker found" not in finding
    assert f"TensorBoard events the run writes under {project.root / 'out'} (config key output_dir)" in finding
    finding, evidence, note = check(text.replace("logdir: runs/synthetic-tanh-mlp-bs64-lr5e-2\n", ""))
    assert finding.startswith("no tracker found: the sidecar watches the job's own log") and "TensorBoard" not in note
    assert evidence[0].startswith("not found: wandb (WANDB_API_KEY, import wandb), neptune (")


def test_a_missing_output_parent_warns_but_a_missing_dataset_fails(tmp_path: Path) -> None:
    _, report = _project_check(tmp_path, ["train.sh", "--logdir", "nowhere/yet/run"])
    paths = next(r for r in report.results if r.name == "paths")
    assert paths.status is CheckStatus.WARNED and "the trainer must create it" in paths.finding
    _, report = _project_check(tmp_path / "b", ["train.sh", "--data_dir", "/no/such/dataset"])
    paths = next(r for r in report.results if r.name == "paths")
    assert paths.status is CheckStatus.FAILED and "/no/such/dataset" in paths.finding


def _events(folder: Path, values: list[float]) -> Path:
    return write_tb_events(folder, [tb_event(step, "train/loss", value) for step, value in enumerate(values, 1)])


def test_discovery_never_merges_sibling_runs_and_skips_files_older_than_the_job(tmp_path: Path) -> None:
    _events(tmp_path / "runs" / "old", [1.0, float("nan")])
    time.sleep(1.1)  # event file names carry whole seconds
    since = time.time()
    assert discover(tmp_path, since=since) == ([], "")  # only an older run's files: nothing of this run's
    _events(tmp_path / "runs" / "mine" / "train", [1.0, 0.9])
    _events(tmp_path / "runs" / "mine" / "validation", [1.1])
    specs, _ = discover(tmp_path, since=since)
    assert [s.locator for s in specs] == [str(tmp_path / "runs" / "mine")]  # train/ + validation/
    _events(tmp_path / "runs" / "neighbour", [1.0])
    specs, note = discover(tmp_path, since=since)
    assert specs == [] and "2 TensorBoard candidates" in note and str(tmp_path / "runs" / "neighbour") in note
    claimed, _ = discover(tmp_path, since=since, claimed=[str(tmp_path / "runs" / "neighbour")])
    assert [s.locator for s in claimed] == [str(tmp_path / "runs" / "mine")]


def _settings(tmp_path: Path, identity: RunSources, **extra: object) -> WatchPlan:
    return WatchPlan(run_name="r", job_id=None, state_file=tmp_path / "s.json", evidence_dir=tmp_path / "e",
                           identity=identity, **extra)  # type: ignore[arg-type]


def test_ambiguous_ownership_is_wait_naming_the_candidates_never_stop(tmp_path: Path) -> None:
    since = time.time() - 1
    _events(tmp_path / "runs" / "a", [1.0, float("nan")] * 10)
    _events(tmp_path / "runs" / "b", [1.0, float("nan")] * 10)
    judged = judge_once(_settings(tmp_path, RunSources(since=since, workdir=str(tmp_path))))
    verdict, data_source = judged.verdict, judged.data_source
    assert verdict.decision.value == "WAIT" and data_source == "unreachable"
    assert "runs/a" in verdict.message and "runs/b" in verdict.message


def test_the_recorded_folder_is_read_without_files_from_before_the_run(tmp_path: Path) -> None:
    folder = tmp_path / "runs" / "same-name"
    old = _events(folder, [float("nan")] * 12)
    time.sleep(1.1)
    since = time.time()
    new = _events(folder, [1.0, 0.9, 0.8])
    _events(tmp_path / "runs" / "other", [float("nan")] * 12)  # a neighbour, written now
    identity = RunSources(since=since, workdir=str(tmp_path), specs=tb_specs(folder))
    sources = SourceSet(_settings(tmp_path, identity), None)
    sources.read()
    assert sources.files_inspected() == [str(new)] and str(old) not in sources.files_inspected()
    assert [round(float(v), 3) for v in sources.history().series("train/loss")[1]] == [1.0, 0.9, 0.8]


WANDB_RUN = textwrap.dedent("""
    import sys, wandb
    run = wandb.init(project="identity")
    for step in range(20):
        run.log({"train/loss": float("nan") if sys.argv[1] == "nan" and step > 5 else 1.0 / (step + 1)}, step=step)
    run.finish()
""")


def _wandb_run(work: Path, run_id: str, kind: str) -> None:
    env = dict(os.environ, WANDB_MODE="offline", WANDB_SILENT="true", WANDB_DISABLE_GIT="true", WANDB_CONSOLE="off",
               WANDB_RUN_ID=run_id)
    (work / "w.py").write_text(WANDB_RUN)
    subprocess.run([sys.executable, "w.py", kind], cwd=work, env=env, check=True, capture_output=True, timeout=120)


def test_the_sidecar_reads_exactly_its_own_wandb_run_in_a_shared_wandb_folder(tmp_path: Path) -> None:
    _wandb_run(tmp_path, "mine0001", "ok")
    _wandb_run(tmp_path, "other001", "nan")  # newer: "the newest .wandb" would be this one
    identity = RunSources(since=0.0, workdir=str(tmp_path), specs=[
        SourceSpec("wandb", "mine0001", "guarded-sbatch", WriterIdentity(run_id="mine0001"), (str(tmp_path),))])
    sources = SourceSet(_settings(tmp_path, identity), None)
    sources.read()
    assert sources.active_kind == "wandb" and sources.describe().endswith("/mine0001")
    assert all("other001" not in f for f in sources.files_inspected())


MLFLOW_RUNS = textwrap.dedent("""
    import json, os, sys, mlflow
    mlflow.set_tracking_uri(sys.argv[1])
    for name, tag in (("mine", sys.argv[2]), ("neighbour", "someone-else")):
        os.environ["MLFLOW_RUN_CONTEXT"] = json.dumps({"guarded_sbatch.run": tag})
        with mlflow.start_run(run_name=name):
            for step in range(8):
                mlflow.log_metric("train/loss", float("nan") if name == "neighbour" else 1.0 / (step + 1), step=step)
""")


def test_the_mlflow_run_is_the_one_carrying_the_runs_tag_not_the_newest(tmp_path: Path) -> None:
    pytest.importorskip("mlflow")
    (tmp_path / "m.py").write_text(MLFLOW_RUNS)
    subprocess.run([sys.executable, "m.py", f"sqlite:///{tmp_path / 'mlflow.db'}", "tag-of-mine"], cwd=tmp_path,
                   check=True, capture_output=True, timeout=240)
    identity = RunSources(since=0.0, workdir=str(tmp_path), specs=[
        SourceSpec("mlflow", "", "the job's MLflow run", WriterIdentity(tag="tag-of-mine"), (str(tmp_path),))])
    sources = SourceSet(_settings(tmp_path, identity), None)
    sources.read()
    assert sources.active_kind == "mlflow"
    values = sources.history().series("train/loss")[1]
    assert len(values) == 8 and not any(math.isnan(v) for v in values)  # no NaN: not the neighbour's newer run


def test_local_test_only_creates_no_job(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    result = project.cli("--guard-backend", "local", "--test-only", "train.sh")
    assert result.returncode == 0, result.stderr
    assert re.search(r"sbatch: Job \d+ to start at", result.stderr) and result.stdout == ""
    jobs = project.state_dir / "local-jobs"
    assert not (jobs.is_dir() and any(p.name.isdigit() for p in jobs.iterdir()))  # the id is only looked at
    assert not (project.state_dir / "runs").exists()


def test_monitor_job_uses_the_runs_record_and_the_backend_from_the_environment(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    project.env["GUARDED_SBATCH_BACKEND"] = "local"
    result = project.cli("train.sh", "--steps", "60", "--step-seconds", "0")
    assert result.returncode == 0, result.stderr
    job_id = result.stdout.split()[-1]
    from e2e_helpers import wait_for
    from guarded_sbatch.scheduler.local import LocalScheduler

    scheduler = LocalScheduler(project.state_dir / "local-jobs")
    wait_for(lambda: scheduler.state(job_id).is_terminal, 60, 0.5, "the job to end")
    once = project.cli_here("monitor", "--once", "--json", "--job", job_id)
    payload = json.loads(once.stdout)
    assert once.returncode == {"CONTINUE": 0, "WAIT": 10, "STOP": 11}[payload["decision"]], once.stderr
    assert payload["data_source"] == "tensorboard_ok" and payload["last_step"] == 60
    watched = project.cli("monitor", "--job", job_id, "--fast-interval", "1", timeout=60)
    assert f"{project.name} (job" in watched.stdout
    assert "runs/synthetic-tanh-mlp-bs64-lr5e-2" in watched.stdout
    project.env["GUARDED_SBATCH_BACKEND"] = "nowhere"
    bad = project.cli_here("monitor", "--job", job_id)
    assert bad.returncode == 2 and "GUARDED_SBATCH_BACKEND" in bad.stderr


def test_a_tracker_store_two_runs_share_is_neither_runs_own_folder(tmp_path: Path) -> None:
    """A tracker run pinned by its id lives in a store other jobs' runs share (an MLflow store named by an absolute
    MLFLOW_TRACKING_URI): the own-folder check claims it for neither run, while a kind's file named by a path is."""
    from guarded_sbatch.launch.checks.own_folder import recorded_folders

    store = str(tmp_path / "shared" / "mlruns")
    env = {"PATH": os.environ["PATH"], "MLFLOW_TRACKING_URI": store}
    _, report = _project_check(tmp_path, ["train.sh"], env=env)
    plan = report.details["source_plan"]
    pinned = plan.sources.pinned("mlflow")
    assert pinned is not None and pinned.locator == store and pinned.writer.tag
    assert store not in plan.sources.claimed_folders()
    own_folder = next(r for r in report.results if r.name == "own-folder")
    assert store not in " ".join(own_folder.evidence)
    record = {"sources": {"specs": [pinned.to_json(), SourceSpec("csv", "/p/out/metrics.csv").to_json()]}}
    assert recorded_folders(record) == ["/p/out/metrics.csv"]
