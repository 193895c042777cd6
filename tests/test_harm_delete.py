"""Deletion never reaches outside the run's own folders: tampered records, symlink races (>= 1000
attempts), a bind mount inside the run root, MLflow ids. Canary files outside must keep every byte."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from guarded_sbatch.actions.cleanup import execute_cleanup, plan_cleanup
from guarded_sbatch.actions.path_guard import PathRefusedError, check_deletable, delete_guarded
from guarded_sbatch.records.registry import RunRecord, create_run


@pytest.fixture(autouse=True)
def isolated_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GUARDED_SBATCH_STATE_DIR", str(tmp_path / "state"))


def plant_canaries(folder: Path) -> int:
    """A small tree of files outside the run; returns its size in bytes."""
    (folder / "deep" / "er").mkdir(parents=True, exist_ok=True)
    for index, path in enumerate([folder / "c1", folder / "deep" / "c2", folder / "deep" / "er" / "c3"]):
        path.write_bytes(b"canary-%d " % index * 100)
    return tree_bytes(folder)


def tree_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def tamper(record: RunRecord, **changes: object) -> RunRecord:
    path = record.folder / "run.json"
    raw = json.loads(path.read_text())
    raw.update(changes)
    path.write_text(json.dumps(raw))
    return RunRecord.from_json(raw)


def run_cleanup(record: RunRecord, roots: tuple[Path, ...] = ()) -> list[str]:
    plan = plan_cleanup(record, roots, homes=set())
    outcomes = execute_cleanup(plan, record, scheduler=None)
    return [f"{o.ok} {o.detail}" for o in outcomes]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    (folder / "ckpt").mkdir(parents=True)
    (folder / "ckpt" / "w.pt").write_bytes(b"weights")
    return folder


TAMPERS = [
    {"submit_dir": "/", "checkpoint_dir": "/etc"},
    {"submit_dir": "/", "checkpoint_dir": "/usr/lib"},
    {"submit_dir": "/root", "checkpoint_dir": "/root/.ssh"},
    {"submit_dir": "/usr", "checkpoint_dir": "/usr/lib"},
    {"checkpoint_dir": "/etc"},
    {"artifact_dir": "/usr/lib"},
    {"checkpoint_dir": "../canary"},
    {"checkpoint_dir": "CANARY"},
    {"submit_dir": "CANARY_PARENT", "checkpoint_dir": "CANARY"},
    {"submit_dir": "CANARY", "checkpoint_dir": "CANARY/deep"},
    {"wandb_paths": ["CANARY/wandb/run-20260101_000000-x/run-x.wandb"]},
    {"tracker": {"kind": "wandb", "run_dir": "CANARY/wandb/run-20260101_000000-x"}},
    {"tracker": {"kind": "mlflow", "run_id": "*", "tracking_uri": "PROJECT/mlruns"}},
    {"tracker": {"kind": "mlflow", "run_id": "abc", "tracking_uri": "CANARY/mlruns"}},
    {"tracker": {"kind": "mlflow", "run_id": "../../x", "tracking_uri": "PROJECT/mlruns"}},
]


@pytest.mark.parametrize("change", TAMPERS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items())[:60])
def test_a_tampered_record_deletes_nothing_outside_the_run(change: dict, project: Path, tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    before = plant_canaries(canary)
    mlruns = canary / "mlruns" / "0" / "abc"
    mlruns.mkdir(parents=True)
    (mlruns / "meta.yaml").write_text("run_id: abc\nlifecycle_stage: active\n")
    for other in ("r1", "r2"):
        (project / "mlruns" / "0" / other).mkdir(parents=True)
        (project / "mlruns" / "0" / other / "meta.yaml").write_text(f"run_id: {other}\nlifecycle_stage: active\n")
    before = tree_bytes(canary)
    record = create_run("tamper-test-run", "local", "", submit_dir=str(project), checkpoint_dir=str(project / "ckpt"))
    text = json.dumps(change).replace("PROJECT", str(project)).replace("CANARY_PARENT", str(tmp_path)).replace(
        "CANARY", str(canary))
    tampered = tamper(record, **json.loads(text))
    run_cleanup(tampered)
    assert tree_bytes(canary) == before
    assert "lifecycle_stage: active" in (mlruns / "meta.yaml").read_text()
    for other in ("r1", "r2"):
        assert "active" in (project / "mlruns" / "0" / other / "meta.yaml").read_text()


def test_an_untampered_record_still_deletes_its_checkpoints(project: Path) -> None:
    record = create_run("plain-run-ok", "local", "", submit_dir=str(project), checkpoint_dir=str(project / "ckpt"))
    lines = run_cleanup(record)
    assert not (project / "ckpt").exists(), lines


def test_symlink_races_never_reach_outside(tmp_path: Path) -> None:
    """A thread keeps swapping folders of the tree (the target, a parent inside it) for symlinks to the
    canary while cleanup deletes: over 1 000 attempts, the canary keeps every byte."""
    root = tmp_path / "runs"
    canary = tmp_path / "canary"
    before = plant_canaries(canary)
    attempts = refused = 0
    for attempt in range(1000):
        run = root / f"r{attempt % 7}"
        target = run / "ckpt"
        inner = target / "a"
        (inner / "b").mkdir(parents=True, exist_ok=True)
        (inner / "b" / "f").write_bytes(b"x" * 10)
        stop = threading.Event()

        def swap() -> None:
            flip = 0
            while not stop.is_set():
                victim = (target, inner)[flip % 2]
                flip += 1
                try:
                    os.rename(victim, victim.with_name(victim.name + ".real"))
                    os.symlink(canary, victim)
                    os.unlink(victim)
                    os.rename(victim.with_name(victim.name + ".real"), victim)
                except OSError:
                    pass

        racer = threading.Thread(target=swap)
        racer.start()
        try:
            guarded = check_deletable(target, recorded_paths=[str(target)], roots=(root,), homes=set())
            delete_guarded(guarded)
        except (PathRefusedError, OSError):
            refused += 1
        finally:
            stop.set()
            racer.join()
        attempts += 1
        for leftover in (target, inner):
            if leftover.is_symlink():
                leftover.unlink()
        shutil.rmtree(run, ignore_errors=True)
        assert tree_bytes(canary) == before, f"attempt {attempt}: canary changed"
    assert attempts == 1000
    assert tree_bytes(canary) == before


def test_a_bind_mount_inside_the_run_is_not_crossed(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root for mount --bind") if os.environ.get("CI") != "true" else pytest.fail("needs root")
    root = tmp_path / "runs"
    target = root / "r" / "ckpt"
    (target / "mnt").mkdir(parents=True)
    (target / "own.pt").write_bytes(b"w" * 100)
    other_user = tmp_path / "other-user"
    before = plant_canaries(other_user)
    mounted = subprocess.run(["mount", "--bind", str(other_user), str(target / "mnt")], capture_output=True)
    if mounted.returncode != 0:
        pytest.fail(f"mount --bind failed: {mounted.stderr!r}")
    try:
        guarded = check_deletable(target, recorded_paths=[str(target)], roots=(root,), homes=set())
        what = delete_guarded(guarded)
        assert "mount point" in what
        assert not (target / "own.pt").exists()
        assert tree_bytes(other_user) == before
    finally:
        subprocess.run(["umount", str(target / "mnt")], capture_output=True)
    assert tree_bytes(other_user) == before


def test_system_folders_and_hidden_home_folders_are_refused(tmp_path: Path) -> None:
    home = tmp_path / "home" / "alice"
    (home / ".ssh").mkdir(parents=True)
    for path, roots in (("/etc/ssh", (Path("/etc"),)), ("/usr/lib", (Path("/usr"),)), (str(home / ".ssh"), (home,))):
        with pytest.raises(PathRefusedError):
            check_deletable(path, recorded_paths=[path], roots=roots, homes={home})
