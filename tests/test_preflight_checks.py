"""The five pre-flight checks on realistic project trees built in temporary folders."""

from __future__ import annotations

import json
import shlex
import time
from datetime import datetime
from pathlib import Path

import pytest

from guarded_sbatch.core.config import Config
from guarded_sbatch.core.mounts import Mount
from guarded_sbatch.core.quiet_hours import parse_quiet_hours
from guarded_sbatch.launch.preflight import format_report
from guarded_sbatch.launch.results import CheckStatus
from guarded_sbatch.scheduler.interface import SubmitRequest
from guarded_sbatch.scheduler.local import LocalScheduler

from preflight_tree import REFERENCE, TRAIN_PY, TRAIN_SH, Tree, build_clean_tree, intended_config

NFS_MOUNTS = [Mount("/", "ext4", "/dev/vda"), Mount("/", "nfs4", "filer:/export/home")]  # the project on NFS


def result(report, name: str):
    return next(r for r in report.results if r.name == name)


@pytest.fixture
def tree(tmp_path: Path) -> Tree:
    return build_clean_tree(tmp_path)


def test_clean_tree_passes_every_check_and_prints_the_launch_command(tree: Tree, tmp_path: Path) -> None:
    scheduler = LocalScheduler(root=tmp_path / "jobs")
    report = tree.run(["--guard-seconds-per-epoch=600", "-p", "gpu", "train.sh"], scheduler=scheduler)
    statuses = {r.name: r.status for r in report.results}
    every = ("config-diff", "run-name", "paths", "interpreter", "arguments", "monitoring", "eta", "own-folder")
    assert statuses == {name: CheckStatus.PASSED for name in every}, (
        format_report(report, color=False)
    )
    assert not report.blocked
    text = format_report(report, color=False)
    assert "```" not in text  # no Markdown fences: the command alone on the last line, ready to copy
    command = text.rstrip().splitlines()[-1].strip()
    assert shlex.split(command) == ["guarded-sbatch", "--guard-seconds-per-epoch=600", "-p", "gpu", "train.sh"]
    assert "\033[" not in text and "\033[" in format_report(report, color=True)


def test_no_reference_yet_warns_and_says_how_to_name_one(tmp_path: Path) -> None:
    # the first run of a config has nothing to diff against: unchecked, not wrong (issue 12)
    tree = build_clean_tree(tmp_path)
    tree.forget_runs()  # a new project: its configs are there, none of them has run
    report = tree.run()
    check = result(report, "config-diff")
    assert check.status is CheckStatus.WARNED and check.finding.startswith("not checked: no reference run yet")
    assert "--guard-reference" in check.finding and "guarded-sbatch reference RUN" in check.finding
    assert "config-diff" not in report.blocking_checks


def test_a_config_that_never_finished_healthy_is_not_a_reference(tree: Tree) -> None:
    """The user's sibling config being tried (it diverged, or never ran) is no reference, however similar."""
    tree.write_config("configs/coco_resnet50_wide.yaml", intended_config(**{"optimizer.lr": 3e-3}))
    tree.forget_runs()
    tree.finished_run("configs/coco_resnet50_wide.yaml", decision="STOP", job_state="CANCELLED")
    tree.finished_run("configs/coco_resnet50_base.yaml", decision="WAIT", job_state="COMPLETED")
    tree.finished_run("configs/coco_resnet50_base.yaml", decision="CONTINUE", job_state="FAILED")
    check = result(tree.run(), "config-diff")
    assert check.status is CheckStatus.WARNED and "no reference run yet" in check.finding, check.finding
    assert "config-diff" not in tree.run().blocking_checks


def test_the_most_similar_run_that_finished_healthy_is_chosen(tree: Tree) -> None:
    tree.finished_run("recipes/imagenet_vit_l.yaml")  # finished healthy too, but unlike this run
    check = result(tree.run(), "config-diff")
    (line,) = [item for item in check.evidence if item.startswith("reference:")]
    assert "configs/coco_resnet50_base.yaml" in line and "among 2 finished healthy run(s)" in line, line


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"train.batch_size": 64}, ["global batch 256 -> 512", "learning rate was not rescaled"]),
        ({"train.gradient_accumulation_steps": 4}, ["gradient accumulation 1 -> 4", "not rescaled"]),
        ({"precision": "fp16"}, ["precision bf16 -> fp16"]),
        ({"precision": None}, ["precision not set here"]),
        ({"train.seed": None}, ["no seed set"]),
    ],
)
def test_each_failing_silent_regressor_is_named(tree: Tree, changes: dict, words: list[str]) -> None:
    tree.write_config("configs/coco_resnet50.yaml", intended_config(**changes))
    check = result(tree.run(), "config-diff")
    assert check.status is CheckStatus.FAILED
    for word in words:
        assert word in check.finding


@pytest.mark.parametrize(
    ("changes", "word"),
    [
        ({"optimizer.betas": [0.9, 0.95]}, "optimizer betas changed"),
        ({"optimizer.weight_decay": None}, "weight decay missing here"),
        ({"optimizer.weight_decay": 0.1}, "weight decay changed"),
    ],
)
def test_optimizer_changes_warn(tree: Tree, changes: dict, word: str) -> None:
    tree.write_config("configs/coco_resnet50.yaml", intended_config(**changes))
    check = result(tree.run(), "config-diff")
    assert check.status is CheckStatus.WARNED and word in check.finding


def test_batch_change_with_linear_lr_rescale_only_warns(tree: Tree) -> None:
    tree.write_config("configs/coco_resnet50.yaml", intended_config(**{"train.batch_size": 64, "optimizer.lr": 6e-4}))
    check = result(tree.run(), "config-diff")
    assert check.status is CheckStatus.WARNED and "linear rule" in check.finding


def test_per_device_batch_against_a_single_gpu_reference(tree: Tree) -> None:
    # the reference recipe ran on one GPU: its batch 32 was the global batch; 8 processes here make 256
    tree.write_config("configs/coco_resnet50_base.yaml", {**REFERENCE, "world_size": 1, "devices": 1})
    tree.reference_ran()
    check = result(tree.run(), "config-diff")
    assert check.status is CheckStatus.FAILED
    assert "global batch 32 -> 256" in check.finding and "not rescaled" in check.finding


def test_accumulation_change_that_keeps_the_global_batch_warns(tree: Tree) -> None:
    tree.write_config(
        "configs/coco_resnet50.yaml", intended_config(**{"train.batch_size": 16, "train.gradient_accumulation_steps": 2})
    )
    check = result(tree.run(), "config-diff")
    assert check.status is CheckStatus.WARNED and "gradient accumulation changed 1 -> 2" in check.finding


def test_workers_on_network_file_system(tree: Tree) -> None:
    tree.write_config("configs/coco_resnet50.yaml", intended_config(**{"data.num_workers": 8}))
    tree.write_config("configs/coco_resnet50_base.yaml", {**REFERENCE, "data": {"root": "data/coco", "num_workers": 8}})
    tree.reference_ran()
    assert result(tree.run(), "config-diff").status is CheckStatus.PASSED  # local ext4: fine
    check = result(tree.run(mounts=NFS_MOUNTS), "config-diff")
    assert check.status is CheckStatus.FAILED and "8 dataloader workers on a nfs4 data path" in check.finding
    assert any("nfs4" in line and "filer:/export/home" in line for line in check.evidence)


def test_hydra_overrides_and_defaults_are_diffed(tree: Tree) -> None:
    tree.write_config("configs/optimizer/adamw.yaml", {"lr": 3e-4, "betas": [0.9, 0.999], "weight_decay": 0.05})
    main = intended_config()
    main.pop("optimizer")
    main["defaults"] = [{"optimizer": "adamw"}, "_self_"]
    tree.write_config("configs/coco_resnet50.yaml", main)
    script = TRAIN_SH.replace('train.py --config "$CONFIG"', 'train.py --config "$CONFIG" optimizer.lr=1e-3 ++precision=fp16')
    tree.write("train.sh", script)
    check = result(tree.run(), "config-diff")
    assert "~ optimizer.lr: 0.0003 -> 0.001" in check.evidence
    assert "precision bf16 -> fp16" in check.finding


def test_run_name_rules(tree: Tree) -> None:
    for bad in ["run-1", "wave-2", "cs-ad", "phase2-internal", "test", "tmp", "my run", "a;b"]:
        check = result(tree.run(["-J", bad, "train.sh"]), "run-name")
        assert check.status is CheckStatus.FAILED, bad
        assert "coco-resnet50-bs32-lr3e-4" in check.finding  # a suggestion built from the config
    good = result(tree.run(["--job-name=swin-t-imagenet-distill-from-vit-l", "train.sh"]), "run-name")
    assert good.status is not CheckStatus.FAILED


def test_run_name_missing(tree: Tree) -> None:
    tree.write("train.sh", TRAIN_SH.replace("#SBATCH --job-name=coco-resnet50-bs256-lr3e-4\n", ""))
    check = result(tree.run(), "run-name")
    assert check.status is CheckStatus.FAILED and "'train.sh'" in check.finding


def test_run_name_collides_with_existing_output_folder_unless_restart(tree: Tree, tmp_path: Path) -> None:
    (tmp_path / "runs/coco-resnet50-bs256-lr3e-4").mkdir()
    (tmp_path / "runs/coco-resnet50-bs256-lr3e-4/events.out.tfevents.1.host").write_bytes(b"")  # a run wrote it
    check = result(tree.run(), "run-name")
    assert check.status is CheckStatus.FAILED and "already exists" in check.finding
    assert result(tree.run(restart=True), "run-name").status is CheckStatus.PASSED
    assert result(tree.run(["--guard-restart", "train.sh"]), "run-name").status is CheckStatus.PASSED


def test_an_empty_output_folder_made_beforehand_is_no_taken_name(tree: Tree, tmp_path: Path) -> None:
    (tmp_path / "runs/coco-resnet50-bs256-lr3e-4").mkdir()  # `mkdir -p runs/NAME` before the launch
    check = result(tree.run(scheduler=LocalScheduler(root=tmp_path / "jobs")), "run-name")
    assert check.status is CheckStatus.PASSED and check.finding.endswith("follows the pattern and is free")
    assert f"output folder {tmp_path / 'runs/coco-resnet50-bs256-lr3e-4'} exists and is empty: not a run's" \
        in check.evidence


def test_run_name_collides_with_a_running_job(tree: Tree, tmp_path: Path) -> None:
    scheduler = LocalScheduler(root=tmp_path / "jobs")
    sleeper = tree.write("sleep.sh", "#!/bin/bash\nsleep 30\n")
    job = scheduler.submit(SubmitRequest(sleeper, ("--job-name=coco-resnet50-bs256-lr3e-4",), workdir=tmp_path))
    try:
        deadline = time.time() + 10
        while "coco-resnet50-bs256-lr3e-4" not in scheduler.active_job_names() and time.time() < deadline:
            time.sleep(0.1)
        check = result(tree.run(scheduler=scheduler), "run-name")
        assert check.status is CheckStatus.FAILED and "queued or running job" in check.finding
    finally:
        scheduler.cancel(job)


def test_missing_paths_fail(tree: Tree, tmp_path: Path) -> None:
    (tmp_path / "weights/r50.pth").unlink()
    (tmp_path / "logs").rmdir()
    check = result(tree.run(), "paths")
    assert check.status is CheckStatus.FAILED
    assert "checkpoint path" in check.finding and "r50.pth" in check.finding
    assert "sbatch will not create it" in check.finding


def test_paths_from_the_launcher_line_and_chdir(tree: Tree, tmp_path: Path) -> None:
    script = TRAIN_SH.replace(
        '--config "$CONFIG"', '--config "$CONFIG" --data_dir "/no such/data $(whoami)" --resume_from ./ckpt/last.pt'
    )
    tree.write("train.sh", script)
    check = result(tree.run(["--chdir", str(tmp_path / "nowhere"), str(tmp_path / "train.sh")]), "paths")
    assert check.status is CheckStatus.FAILED
    assert "--chdir" in check.finding and "does not exist" in check.finding
    assert any("needs a shell" in line or "not verifiable" in line for line in check.evidence)


def test_monitoring_detection(tree: Tree) -> None:
    tree.write("train.py", "print('no tracker')\n")
    (tree.root / "runs").rmdir()
    tree.write_config("configs/coco_resnet50.yaml", intended_config(**{"train.output_dir": "out"}))
    (tree.root / "out").mkdir()
    check = result(tree.run(), "monitoring")
    # the job's own log is always there for the sidecar to read: watchable, with a note (issue 12)
    assert check.status is CheckStatus.PASSED and "no tracker" in check.finding and "logs/%x-%j.out" in check.finding
    env_only = result(tree.run(env={"MLFLOW_TRACKING_URI": "http://mlflow:5000"}), "monitoring")
    assert env_only.status is CheckStatus.WARNED and "MLFLOW_EXPERIMENT_NAME" in env_only.finding
    tree.write("train.sh", TRAIN_SH.replace("export WANDB_PROJECT=coco-detection\n", ""))
    tree.write("train.py", "import wandb\nwandb.init()\n")
    no_project = result(tree.run(), "monitoring")
    assert no_project.status is CheckStatus.FAILED and "project not set" in no_project.finding


def test_eta_past_time_limit_fails_and_quiet_hours_warn(tree: Tree, tmp_path: Path) -> None:
    scheduler = LocalScheduler(root=tmp_path / "jobs")
    too_long = result(tree.run(["--guard-seconds-per-epoch=1800", "train.sh"], scheduler=scheduler), "eta")
    assert too_long.status is CheckStatus.FAILED and "time limit is 04:00:00" in too_long.finding
    now = datetime(2026, 3, 2, 21, 0).astimezone()
    config = Config(quiet_hours=(parse_quiet_hours("22:00-07:00"),))
    quiet = result(tree.run(["--guard-seconds-per-epoch=600", "train.sh"], config=config, now=now), "eta")
    # no scheduler: the queue wait counts as zero, so 21:00 + 12 × 600 s = 23:00, inside the quiet hours
    assert quiet.status is CheckStatus.WARNED
    assert quiet.finding.startswith(f"ends about 23:00 {now.strftime('%Z')}")
    assert "quiet hours (22:00-07:00)" in quiet.finding
    assert quiet.details["eta_epoch_s"] == now.timestamp() + 7200


def test_eta_reads_seconds_per_epoch_from_reference_logs(tree: Tree) -> None:
    tree.write(
        "configs/train.log",
        "2026-03-01 10:00:00 epoch 1 done\n2026-03-01 10:10:00 epoch 2 done\n2026-03-01 10:20:00 epoch 3 done\n",
    )
    check = result(tree.run(["--guard-reference=configs/coco_resnet50_base.yaml", "train.sh"]), "eta")
    assert "600 s per epoch" in check.evidence[0] and "train.log" in check.evidence[0]


def test_waivers_unblock_and_are_recorded(tmp_path: Path) -> None:
    tree = build_clean_tree(tmp_path)
    tree.write_config("configs/coco_resnet50.yaml", intended_config(**{"train.seed": None}))
    argv = ["--guard-waive", "config-diff=seed chosen at random on purpose", "--guard-seconds-per-epoch=600", "train.sh"]
    report = tree.run(argv)
    assert not report.blocked
    assert [(w.check, w.reason) for w in report.waivers] == [("config-diff", "seed chosen at random on purpose")]
    data = json.loads(json.dumps(report.to_json()))
    assert data["waivers"] == [{"check": "config-diff", "reason": "seed chosen at random on purpose"}]
    assert shlex.split(data["launch_command"]) == ["guarded-sbatch", *argv]
    mandatory = Config(mandatory_checks=frozenset({"config-diff"}))
    refused = tree.run(argv, config=mandatory)
    assert refused.blocked and refused.refused_waivers[0][1] == "the site makes config-diff mandatory"


def test_warnings_never_block(tree: Tree) -> None:
    report = tree.run()  # no seconds per epoch: the ETA check warns
    assert result(report, "eta").status is CheckStatus.WARNED
    assert not report.blocked


def test_json_report_shape(tree: Tree) -> None:
    data = tree.run().to_json()
    assert [c["name"] for c in data["checks"]] == ["config-diff", "run-name", "paths", "interpreter", "arguments",
                                                   "monitoring", "eta", "own-folder"]
    assert all({"name", "status", "finding", "evidence"} <= set(c) for c in data["checks"])


def test_a_mistyped_config_path_fails_once_naming_the_file_meant(tree: Tree) -> None:
    tree.write("train.sh", TRAIN_SH.replace('CONFIG=configs/coco_resnet50.yaml', 'CONFIG=configs/coco_resnet05.yaml'))
    report = tree.run(["--guard-seconds-per-epoch=600", "train.sh"])
    assert report.blocking_checks == ["paths"]  # one failure, the one whose fix applies
    paths = result(report, "paths")
    assert f"does not exist; did you mean {tree.root / 'configs' / 'coco_resnet50.yaml'}?" in paths.finding
    diff = result(report, "config-diff")
    assert diff.status is CheckStatus.WARNED and "(see paths)" in diff.finding and "--guard-config" not in diff.finding


def test_a_seed_the_program_sets_in_code_is_a_seed_set(tree: Tree) -> None:
    """No seed key in the config, but train.py seeds its generators itself: nothing to fail (its evidence says where);
    a seeding call without an argument is no seed."""
    tree.write_config("configs/coco_resnet50.yaml", intended_config(**{"train.seed": None}))
    tree.write("train.py", "import torch\ntorch.manual_seed(0)\n" + TRAIN_PY)
    check = result(tree.run(), "config-diff")
    assert check.status is CheckStatus.PASSED, check.finding
    assert any("seed set in the program: train.py line 2: torch.manual_seed(0)" in e for e in check.evidence)
    tree.write("train.py", "import random\nrandom.seed()\n" + TRAIN_PY)
    assert "no seed set" in result(tree.run(), "config-diff").finding
