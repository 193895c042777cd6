"""The login node's path (CLI, launch, scheduler, config) must not import wandb, tensorboard, matplotlib, torch, or the
extras' plotext, apprise and rich (core/extras.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


HEAVY = ("wandb", "tensorboard", "matplotlib", "torch", "tensorflow", "plotext", "apprise", "rich")  # the last three: extras
LOGIN_MODULES = [
    "guarded_sbatch.core.config",
    "guarded_sbatch.sbatch.argv",
    "guarded_sbatch.sbatch.script",
    "guarded_sbatch.launch.preflight",
    "guarded_sbatch.scheduler",
]

PROBE = """
import importlib, json, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {heavy})))
"""


def loaded_heavy_modules(modules: list[str], code_extra: str = "") -> list[str]:
    probe = PROBE.replace("{heavy}", repr(set(HEAVY))) + code_extra
    out = subprocess.run([sys.executable, "-c", probe, *modules], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_launch_and_config_modules_stay_light() -> None:
    assert loaded_heavy_modules(LOGIN_MODULES) == []


def test_cli_modules_stay_light() -> None:
    assert loaded_heavy_modules(["guarded_sbatch.cli.main", "guarded_sbatch.cli.launch", "guarded_sbatch.cli.shim"]) == []


def test_a_whole_preflight_run_stays_light(tmp_path: Path) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from preflight_tree import build_clean_tree

    build_clean_tree(tmp_path)
    run = f"""
from pathlib import Path
from guarded_sbatch.core.config import Config
from guarded_sbatch.sbatch.argv import split_sbatch_argv
from guarded_sbatch.launch.preflight import run_preflight, format_report
report = run_preflight(split_sbatch_argv(["train.sh"]), Config(), None, cwd=Path({str(tmp_path)!r}), env={{}})
format_report(report, color=False)
print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {set(HEAVY)!r})))
"""
    assert loaded_heavy_modules([], run) == []


def test_the_launch_checks_the_judge_thresholds_without_loading_the_judge() -> None:
    """Every guarded launch checks the config's [judge] table (and records it): that must not pull in the
    decision core and numpy (~0.15 s per launch on a login node)."""
    run = """
from guarded_sbatch.launch.pipeline import judge_table
from guarded_sbatch.core.config import Config
judge_table(Config())
print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'numpy' or m.startswith('guarded_sbatch.judge')
                        and m not in {'guarded_sbatch.judge', 'guarded_sbatch.judge.policy', 'guarded_sbatch.judge.table',
                                      'guarded_sbatch.judge.keys'})))
"""
    assert loaded_heavy_modules([], run) == []


def test_a_local_launch_imports_no_slurm_module(tmp_path: Path) -> None:
    """Only the chosen backend is imported (scheduler/__init__.py reads the registry, not every backend): a local
    launch, pre-flight to the recorded run, loads none of the Slurm backend's modules."""
    sys.path.insert(0, str(Path(__file__).parent))
    from e2e_helpers import EXAMPLE_NAME, make_project, submitted_job_id, wait_for
    from guarded_sbatch.scheduler.local import LocalScheduler

    project = make_project(tmp_path)
    loaded = tmp_path / "modules.json"
    probe = (f"import atexit, json, runpy, sys\natexit.register(lambda: open({str(loaded)!r}, 'w').write(json.dumps("
             "sorted(m for m in sys.modules if m.startswith('guarded_sbatch.')))))\n"
             "sys.argv = ['guarded-sbatch', *sys.argv[1:]]\nrunpy.run_module('guarded_sbatch', run_name='__main__')\n")
    launched = subprocess.run([sys.executable, "-c", probe, "--guard-backend", "local", "--guard-tb", f"runs/{EXAMPLE_NAME}",
                               "train.sh", "--steps", "40"], cwd=project.root, env=project.env, capture_output=True,
                              text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert launched.returncode == 0, launched.stderr
    job_id = submitted_job_id(launched.stdout)
    scheduler = LocalScheduler(project.state_dir / "local-jobs")
    for job in (job_id, project.run_record(job_id)["sidecar_id"]):
        scheduler.cancel(job)
        wait_for(lambda job=job: scheduler.state(job).is_terminal, 30, what=f"local job {job} to end")
    modules = json.loads(loaded.read_text())
    assert "guarded_sbatch.scheduler.local" in modules and "guarded_sbatch.launch.pipeline" in modules
    assert [m for m in modules if m.startswith("guarded_sbatch.scheduler.slurm")] == []


def _modules_after(argv: list[str], tmp_path: Path) -> list[str]:
    """The modules a CLI start loaded: numpy and every guarded_sbatch module, written as the process exits."""
    loaded = tmp_path / "modules.json"
    probe = (f"import atexit, json, runpy, sys\natexit.register(lambda: open({str(loaded)!r}, 'w').write(json.dumps("
             "sorted(m for m in sys.modules if m.startswith('guarded_sbatch.') or m == 'numpy'))))\n"
             "sys.argv = ['guarded-sbatch', *sys.argv[1:]]\nrunpy.run_module('guarded_sbatch', run_name='__main__')\n")
    env = {**__import__("os").environ, "GUARDED_SBATCH_STATE_DIR": str(tmp_path / "state")}
    done = subprocess.run([sys.executable, "-c", probe, *argv], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    return json.loads(loaded.read_text())


def test_monitor_and_show_help_load_no_reader_numpy_or_loop(tmp_path: Path) -> None:
    """`monitor --help` and `show --help` build their parsers from light declarations (the source kinds' flags): the
    readers, numpy and the sidecar loop load only once there is a run to judge (~0.3 s of CPU per start)."""
    for command in ("monitor", "show"):
        modules = _modules_after([command, "--help"], tmp_path)
        assert "guarded_sbatch.sources.kinds" in modules or command == "show"
        assert [m for m in modules if m == "numpy" or m.startswith(("guarded_sbatch.sidecar.loop",
                                                                   "guarded_sbatch.sidecar.source_set",
                                                                   "guarded_sbatch.sources.tensorboard"))] == [], command


def test_asking_a_local_job_state_parses_no_sbatch_options(tmp_path: Path) -> None:
    """`status`, `show`, `kill` and a sidecar ask the local backend for job states: only a submission loads its
    option parser (scheduler/local_options.py and the sbatch script parser under it)."""
    run = f"""
from pathlib import Path
from guarded_sbatch.core.errors import SchedulerError
from guarded_sbatch.scheduler.local import LocalScheduler
try:
    LocalScheduler(Path({str(tmp_path)!r})).state("1")
except SchedulerError:  # no such job: asked all the same
    pass
print(json.dumps(sorted(m for m in sys.modules if m.startswith(('guarded_sbatch.scheduler.local_options',
                                                                 'guarded_sbatch.sbatch.script')))))
"""
    assert loaded_heavy_modules([], run) == []
