"""The path guard on real files: every refusal, and deletion that never follows a symlink."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from guarded_sbatch.actions.path_guard import (
    PathRefusedError, allowed_roots, check_deletable, delete_guarded, home_folders,
)


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    run_root = tmp_path / "runs"
    (run_root / "coco-resnet50-bs256" / "ckpt").mkdir(parents=True)
    (run_root / "coco-resnet50-bs256" / "ckpt" / "step-100.pt").write_bytes(b"weights")
    return run_root


def check(path: Path | str, root: Path, *, recorded: list[str] | None = None, homes: set[Path] | None = None):
    return check_deletable(path, recorded_paths=recorded if recorded is not None else [str(path)], roots=(root,),
                           homes=homes if homes is not None else set())


def refused(path: Path | str, root: Path, **kwargs) -> str:
    with pytest.raises(PathRefusedError) as info:
        check(path, root, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_accepts_a_recorded_folder_inside_the_run_root_and_deletes_it(root: Path) -> None:
    target = root / "coco-resnet50-bs256" / "ckpt"
    guarded = check(target, root)
    assert guarded.resolved == target.resolve()
    assert delete_guarded(guarded) == "folder deleted"
    assert not target.exists()
    assert (root / "coco-resnet50-bs256").is_dir()  # only the recorded folder goes
    assert delete_guarded(guarded) == "already gone"


def test_refuses_dot_dot_components(root: Path) -> None:
    sneaky = f"{root}/coco-resnet50-bs256/../coco-resnet50-bs256/ckpt"
    assert "'..'" in refused(sneaky, root)


def test_refuses_the_filesystem_root(root: Path) -> None:
    assert "file-system root" in refused("/", root)


def test_refuses_the_run_root_itself(root: Path) -> None:
    assert "run root" in refused(root, root)


def test_refuses_a_folder_holding_the_run_root(root: Path) -> None:
    assert "holds the run root" in refused(root.parent, root, homes=set())


def test_refuses_a_path_not_recorded_for_the_run(root: Path) -> None:
    other = root / "another-run"
    other.mkdir()
    message = refused(other, root, recorded=[str(root / "coco-resnet50-bs256" / "ckpt")])
    assert "not recorded" in message
    assert other.is_dir()


def test_refuses_a_path_outside_the_run_roots(root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere" / "ckpt"
    outside.mkdir(parents=True)
    assert "outside the run roots" in refused(outside, root)


def test_refuses_a_symlink_that_leads_out(root: Path, tmp_path: Path) -> None:
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "data.bin").write_bytes(b"keep me")
    link = root / "coco-resnet50-bs256" / "ckpt-link"
    link.symlink_to(precious, target_is_directory=True)
    assert "symlink" in refused(link, root)
    assert (precious / "data.bin").read_bytes() == b"keep me"


def test_refuses_a_path_under_a_symlinked_folder_that_leads_out(root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    (outside / "ckpt").mkdir(parents=True)
    (root / "linked-run").symlink_to(outside, target_is_directory=True)
    assert "leads out" in refused(root / "linked-run" / "ckpt", root)
    assert (outside / "ckpt").is_dir()


def test_refuses_home_folders(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_home = root / "alice"
    fake_home.mkdir()
    monkeypatch.setenv("HOME", str(fake_home))
    assert "home folder" in refused(fake_home, root, homes=home_folders())  # $HOME itself
    someone = root / "bob"
    someone.mkdir()
    assert "home folder" in refused(someone, root, homes={someone})  # any user's home


def test_real_home_folders_include_every_users_home() -> None:
    import pwd

    homes = home_folders()
    assert Path(pwd.getpwuid(os.getuid()).pw_dir) in homes
    assert all(home != Path("/") for home in homes)


def test_refuses_a_folder_that_holds_a_home(root: Path) -> None:
    parent = root / "people"
    (parent / "carol").mkdir(parents=True)
    assert "home folder" in refused(parent, root, homes={parent / "carol"})


def test_without_run_roots_only_the_submit_folder_is_allowed(tmp_path: Path) -> None:
    submit_dir = tmp_path / "project"
    (submit_dir / "checkpoints").mkdir(parents=True)
    roots = allowed_roots((), submit_dir)
    assert roots == (submit_dir,)
    inside = check_deletable("checkpoints", recorded_paths=["checkpoints"], roots=roots, base_dir=submit_dir, homes=set())
    assert inside.resolved == (submit_dir / "checkpoints").resolve()
    (tmp_path / "shared").mkdir()
    with pytest.raises(PathRefusedError, match="outside the run roots"):
        check_deletable(tmp_path / "shared", recorded_paths=[str(tmp_path / "shared")], roots=roots, homes=set())
    with pytest.raises(PathRefusedError, match="no run roots"):
        check_deletable(tmp_path / "shared", recorded_paths=[str(tmp_path / "shared")], roots=(), homes=set())


def test_a_relative_path_without_a_base_is_refused(root: Path) -> None:
    assert "relative" in refused("ckpt", root, recorded=["ckpt"])


def test_deletion_does_not_follow_symlinks_inside_the_tree(root: Path, tmp_path: Path) -> None:
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "data.bin").write_bytes(b"keep me")
    target = root / "coco-resnet50-bs256" / "ckpt"
    (target / "pretrained").symlink_to(precious, target_is_directory=True)
    delete_guarded(check(target, root))
    assert not target.exists()
    assert (precious / "data.bin").read_bytes() == b"keep me"


def test_a_symlink_inside_the_root_loses_the_link_alone_never_its_target(root: Path) -> None:
    real = root / "coco-resnet50-bs256" / "ckpt"
    (real / "step-1.pt").write_bytes(b"keep me")
    link = root / "coco-resnet50-bs256" / "latest"
    link.symlink_to(real, target_is_directory=True)
    guarded = check(link, root)
    assert guarded.is_link and guarded.describe() == f"delete the symlink {link} only (its target {real} is left alone)"
    assert "symlink deleted" in delete_guarded(guarded)
    assert (real / "step-1.pt").read_bytes() == b"keep me" and not os.path.lexists(link)


def test_a_folder_on_the_way_that_is_a_symlink_inside_the_root_is_refused(root: Path) -> None:
    real = root / "coco-resnet50-bs256"
    (root / "alias").symlink_to(real, target_is_directory=True)
    assert "on the way is a symlink" in refused(root / "alias" / "ckpt", root)
    assert (real / "ckpt").is_dir()


def test_a_folder_swapped_for_a_symlink_after_the_plan_is_not_deleted(root: Path, tmp_path: Path) -> None:
    target = root / "coco-resnet50-bs256" / "ckpt"
    guarded = check(target, root)
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "data.bin").write_bytes(b"keep me")
    os.rename(target, root / "moved")
    target.symlink_to(precious, target_is_directory=True)
    with pytest.raises(PathRefusedError, match="changed since the plan"):
        delete_guarded(guarded)
    assert (precious / "data.bin").read_bytes() == b"keep me"
