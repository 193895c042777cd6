"""One watcher that learns everything from the run record (issue 43): a setting goes from the config file to the
watch loop under one name through few modules, and the five watchers of a run (the per-job sidecar, the per-user
monitor, an array's watcher, `monitor`, `show`) judge the same run the same way from the same record."""

from __future__ import annotations

import io
import json
import math
import re
import shutil
from pathlib import Path

import pytest

from source_writers import tb_event, write_tb_events
from test_shared_monitor import FakeSlurm
from guarded_sbatch.core.config import load_config
from guarded_sbatch.launch.pipeline import watch_table
from guarded_sbatch.launch.submit import SidecarResources, render_sidecar_script
from guarded_sbatch.launch.templates import load_template
from guarded_sbatch.records import monitor_registry as registry
from guarded_sbatch.records.registry import RunRecord, create_run
from guarded_sbatch.sidecar.loop import Sidecar
from guarded_sbatch.sidecar.plan import plan_of
from guarded_sbatch.sidecar.state import SidecarState

PACKAGE = Path(__file__).resolve().parents[1] / "wrapper" / "guarded_sbatch"


def test_fast_interval_goes_from_the_config_file_to_the_loop_under_one_name(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Behaviour: `[sidecar] fast_interval_seconds` in the user's config is the loop's pace, through the record (the
    launch's `watch`, the one builder's plan); the sidecar job's command names the run's folder and nothing else."""
    config_file = tmp_path / "config.toml"
    config_file.write_text("[sidecar]\nfast_interval_seconds = 7.0\njob_poll_seconds = 120\n")
    monkeypatch.setenv("GUARDED_SBATCH_USER_CONFIG", str(config_file))
    monkeypatch.delenv("GUARDED_SBATCH_SITE_CONFIG", raising=False)
    monkeypatch.setenv("GUARDED_SBATCH_STATE_DIR", str(tmp_path / "state"))
    config = load_config()
    record = create_run("mnist-mlp-bs64-lr1e-3", "local", "41", submit_dir=str(tmp_path),
                        watch=watch_table(config, stop_command="touch stopped", notes=None, array=False))
    plan = plan_of(RunRecord.from_json(json.loads((record.folder / "run.json").read_text())), record.folder)
    assert plan.sidecar == config.sidecar and plan.stop_command == "touch stopped"
    sidecar = Sidecar(plan, None, io.StringIO(), clock=lambda: 1000.0)
    sidecar.state.started_at, sidecar.state.last_new_data_at = 1.0, 2.0  # past the start-up grace
    assert sidecar._poll_interval(1000.0) == 7.0
    template, _ = load_template("sidecar.sbatch")
    script = render_sidecar_script(template, record, SidecarResources(), python="/usr/bin/python3")
    assert script.splitlines()[-1].split("#")[0].split() == [
        "exec", "/usr/bin/python3", "-P", "-m", "guarded_sbatch", "sidecar", str(record.folder)]


def test_fast_interval_is_named_in_four_modules_and_passes_six() -> None:
    """Structure: the name appears where it is declared (schema), typed (config), and used (loop, its report line);
    the launch, the record and the plan carry the settings' type whole (`SidecarJobSettings`), naming no field."""
    named = sorted(str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")
                   if re.search(r"fast_interval", path.read_text(encoding="utf-8")))
    assert named == ["core/config.py", "core/config_schema.py", "sidecar/loop.py", "sidecar/report.py"]
    spellings = {word for path in named for word in re.findall(r"\w*fast_interval\w*", (PACKAGE / path).read_text())}
    assert spellings == {"fast_interval_s", "fast_interval_seconds"}  # the TOML key, and the one Python name
    path = ["core/config_schema.py", "core/config.py", "launch/pipeline.py", "records/registry.py", "sidecar/plan.py",
            "sidecar/loop.py"]  # declared → typed → recorded at launch (watch_table) → run.json → plan → loop
    assert "dataclasses.asdict(sidecar)" in (PACKAGE / path[2]).read_text()
    assert "recorded_sidecar(" in (PACKAGE / path[4]).read_text()
    assert len(path) <= 6


def _run_dir(tmp_path: Path, name: str) -> Path:
    events = []
    for step in range(1, 121):
        events += [tb_event(step, "train/loss", math.nan if step >= 60 else 1.0 / step + 0.5),
                   tb_event(step, "train/lr", 0.01)]
    write_tb_events(tmp_path / "tb", events)
    return tmp_path / name


def test_the_five_watchers_judge_the_same_run_the_same_way_from_the_same_record(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("GUARDED_SBATCH_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("GUARDED_SBATCH_USER_CONFIG", str(tmp_path / "none.toml"))
    (tmp_path / "none.toml").write_text("")
    _run_dir(tmp_path, "run")
    record = create_run("cifar-resnet18-bs128-lr1e-1", "slurm", "77_1", submit_dir=str(tmp_path),
                        tb_paths=[str(tmp_path / "tb")], judge={"spike_z": 7.0},
                        watch={"sidecar": {"fast_interval_s": 60.0, "job_poll_s": 30.0}})
    text = (record.folder / "run.json").read_text()

    def fresh() -> RunRecord:  # each watcher starts from the same record and no state of an earlier one
        for name in ("sidecar-state.json", "evidence", "sidecar-monitor.out"):
            target = record.folder / name
            shutil.rmtree(target) if target.is_dir() else target.unlink(missing_ok=True)
        assert (record.folder / "run.json").read_text() == text
        return RunRecord.from_json(json.loads(text))

    def judged_by_state() -> tuple[str, str, int | None]:
        state = SidecarState.load(record.folder / "sidecar-state.json")
        return state.last_decision, state.last_reason, state.last_step

    seen: dict[str, tuple[str, str, int | None]] = {}
    slurm = FakeSlurm(["77_1"])  # the per-job sidecar: a watcher of one
    sidecar = Sidecar(plan_of(fresh(), record.folder), slurm, io.StringIO(), clock=lambda: 1000.0)
    sidecar.poll_once()
    sidecar.state.save(sidecar.settings.state_file)  # as its loop does after each poll
    seen["sidecar"] = judged_by_state()
    assert slurm.cancelled == ["77_1"]

    from guarded_sbatch.sidecar.shared_monitor import SharedMonitor

    for kind, folder in (("per-user monitor", tmp_path / "monitor"), ("array watcher", tmp_path / "array-77")):
        fresh()
        registry.register_run(folder, "77_1", {"run_dir": str(record.folder), "run_name": record.run_name})
        slurm = FakeSlurm(["77_1"])
        SharedMonitor(folder, slurm, io.StringIO(), job_id="900", clock=lambda: 1000.0).poll(1000.0)  # type: ignore[arg-type]
        seen[kind] = judged_by_state()
        assert slurm.cancelled == ["77_1"], kind

    from guarded_sbatch.cli.main import main

    fresh()
    capsys.readouterr()
    main(["monitor", "--once", "--json", "--job", "77_1", "--backend", "slurm"])
    answer = json.loads(capsys.readouterr().out)
    seen["monitor"] = (answer["decision"], answer["reason"], answer["last_step"])

    from guarded_sbatch.cli.show import gather

    verdict = gather(fresh())["verdict_obj"]
    seen["show"] = (verdict.decision.value, verdict.reason.value, verdict.last_step)
    assert set(seen.values()) == {("STOP", "non_finite_loss", seen["sidecar"][2])}, seen
    assert seen["sidecar"][2] is not None and seen["sidecar"][2] >= 60
