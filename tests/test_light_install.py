"""`pip install guarded-sbatch` into a user's own environment (issue 44): the wheel declares a small core, names its
extras, installs no `guarded-sbatch` command (which would shadow the site's), and with the core alone the API imports
and judges; a feature that needs a missing extra says in one line which extra installs it.

No network: a fresh venv gets the wheel with --no-deps, and the core's requirements, followed through their own, are
linked in from the suite's environment (their files, dist-info included) — so the venv has exactly what a
`pip install` of the core would give, and `pip check` confirms the declared requirements are all there."""

from __future__ import annotations

import importlib.metadata
import json
import math
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from guarded_sbatch.core.extras import EXTRA_OF
from e2e_helpers import make_project, submitted_job_id, wait_for
from source_writers import tb_event, write_tb_events

REPO = Path(__file__).resolve().parents[1]
CORE = {"numpy", "pyyaml", "psutil", "submitit", "google-crc32c"}
OPTIONAL = ["wandb", "matplotlib", "plotext", "apprise", "rich", "tensorboard", "torch"]
CLEAN_ENV = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}


def _run(argv: list[str], cwd: Path | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=cwd, env=CLEAN_ENV,
                            stdin=subprocess.DEVNULL)
    assert not check or result.returncode == 0, f"{argv} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return result


def _closure(requirements: list[str]) -> set[str]:
    """The distributions these requirements (no extra) pull in, theirs followed in the suite's environment."""
    found: set[str] = set()
    todo = [Requirement(r) for r in requirements]
    while todo:
        req = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        name = canonicalize_name(req.name)
        if name in found:
            continue
        found.add(name)
        todo += [Requirement(r) for r in importlib.metadata.distribution(name).requires or []]
    return found


def _link_distributions(names: set[str], purelib: Path) -> None:
    """Each distribution's top-level files and folders (its dist-info too) linked into purelib."""
    for name in names:
        dist = importlib.metadata.distribution(name)
        base = Path(str(dist.locate_file("")))
        for top in {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}:
            target = purelib / top
            if top != "__pycache__" and not target.exists() and (base / top).exists():
                target.symlink_to(base / top)


@pytest.fixture(scope="module")
def light_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv: the wheel (--no-deps) and the core requirements' closure, nothing else. Returns its python."""
    root = tmp_path_factory.mktemp("light")
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(root / "dist"),
          str(REPO)], cwd=root)
    wheel = next((root / "dist").glob("guarded_sbatch-*.whl"))
    venv = root / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "-q", str(wheel)])
    purelib = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    requires = json.loads(_run([str(python), "-c", "import importlib.metadata as m, json; "
                                "print(json.dumps(m.requires('guarded-sbatch')))"]).stdout)
    _link_distributions(_closure(requires), purelib)
    return python


def test_the_wheel_declares_a_small_core_and_named_extras(light_venv: Path) -> None:
    probe = ("import importlib.metadata as m, json; d = m.distribution('guarded-sbatch'); "
             "print(json.dumps([d.requires, d.metadata.get_all('Provides-Extra'), [e.name for e in d.entry_points]]))")
    requires, extras, entry_points = json.loads(_run([str(light_venv), "-c", probe]).stdout)
    core = {canonicalize_name(Requirement(r).name) for r in requires if Requirement(r).marker is None}
    assert core == CORE
    closure = _closure([r for r in requires if Requirement(r).marker is None])
    print(f"the core's closure: {len(closure)} distributions: {sorted(closure)}")
    assert len(closure) <= 10, sorted(closure)  # against ~50 when everything was core
    assert {"wandb", "plot", "alerts", "terminal", "cli", "all"} <= set(extras)
    by_extra: dict[str, set[str]] = {}
    for text in requires:
        req = Requirement(text)
        for extra in extras:
            if req.marker is not None and req.marker.evaluate({"extra": extra}):
                by_extra.setdefault(extra, set()).add(canonicalize_name(req.name) + "".join(sorted(req.extras)))
    for module, extra in EXTRA_OF.items():  # the extra each missing-package line names installs that package
        assert module in by_extra[extra], (module, extra, by_extra)
    assert by_extra["cli"] == {"guarded-sbatch" + "".join(sorted(set(EXTRA_OF.values())))}
    assert entry_points == []  # no console script
    assert not (light_venv.parent / "guarded-sbatch").exists()
    assert sorted(p.name for p in light_venv.parent.iterdir() if "sbatch" in p.name) == []
    checked = _run([sys.executable, "-m", "pip", "--python", str(light_venv), "check"], check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr  # every declared core requirement is present


def test_the_project_declares_the_extras_the_code_names() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert {canonicalize_name(Requirement(r).name) for r in project["dependencies"]} == CORE
    assert "scripts" not in project  # a `pip install` adds no guarded-sbatch to a user's PATH
    extras = project["optional-dependencies"]
    for module, extra in EXTRA_OF.items():
        assert module in {canonicalize_name(Requirement(r).name) for r in extras[extra]}, (module, extra)


def test_the_api_reads_and_judges_with_the_core_alone(light_venv: Path, tmp_path: Path) -> None:
    losses = [2.0 * math.exp(-step / 40) + 0.1 for step in range(60)] + [1e6 * (step + 1) for step in range(12)]
    write_tb_events(tmp_path / "runs" / "x", [tb_event(step, "train/loss", value) for step, value in enumerate(losses)])
    probe = f"""
import importlib.util, json, sys
from guarded_sbatch import GuardedExecutor, JudgePolicy, MetricPoint, judge, read_metrics
points = read_metrics("tensorboard", {str(tmp_path / "runs" / "x")!r})
verdict = judge(points, JudgePolicy(train_loss_key="train/loss"))
synthetic = judge([MetricPoint(s, 1.7e9 + s, "loss", 1.0 if s < 50 else float("nan")) for s in range(60)])
print(json.dumps({{"points": len(points), "decision": verdict.decision.value, "nan": synthetic.decision.value,
                  "executor": GuardedExecutor.__name__, "where": sys.modules["guarded_sbatch"].__file__,
                  "absent": [m for m in {OPTIONAL!r} if importlib.util.find_spec(m) is None]}}))
"""
    got = json.loads(_run([str(light_venv), "-c", probe], cwd=tmp_path).stdout.strip().splitlines()[-1])
    assert Path(got["where"]).is_relative_to(light_venv.parents[1])  # the wheel's package, not the checkout's
    assert got["absent"] == OPTIONAL  # a light environment indeed
    assert got["points"] == len(losses) and got["decision"] == "STOP" and got["nan"] == "STOP", got


def test_a_missing_extra_says_which_to_install(light_venv: Path, tmp_path: Path) -> None:
    shown = _run([str(light_venv), "-m", "guarded_sbatch", "show", "some-run", "--png", str(tmp_path / "x.png")],
                 cwd=tmp_path, check=False)
    assert shown.returncode == 2, shown.stderr
    assert shown.stderr.strip().count("\n") == 0 and "Traceback" not in shown.stderr, shown.stderr
    assert "matplotlib" in shown.stderr and "pip install 'guarded-sbatch[plot]'" in shown.stderr
    probe = """
from guarded_sbatch.actions.notify import Alert, NotifySettings, send_alert
from guarded_sbatch.cli.show import plot_plain, plot_terminal
from guarded_sbatch.cli.status_table import render_table, render_terminal
rows = [{"run": "r", "job_id": "1", "state": "RUNNING", "decision": "CONTINUE"}]
print(send_alert(NotifySettings(urls=("json://localhost:9",)), Alert("stop", "r", "1", "STOP", "nan", "m")).detail)
print(render_terminal(rows, color=True, width=300) == render_table(rows))
view = {"plotted": {"train_loss": "loss"}, "series": {"loss": ([1, 2], [1.0, 0.5])}, "verdict_obj": None}
curves = plot_terminal(view, color=True).splitlines()
print(curves[:-1] == plot_plain(view).splitlines(), curves[-1])
"""
    alert, plain_table, curves = _run([str(light_venv), "-c", probe], cwd=tmp_path).stdout.strip().splitlines()[-3:]
    assert "alert not sent" in alert and "pip install 'guarded-sbatch[alerts]'" in alert  # the STOP stands; one line says
    assert plain_table == "True"  # status on a terminal without rich: the plain columns
    assert curves.startswith("True (") and "pip install 'guarded-sbatch[plot]'" in curves  # show: numbers, and why


def test_a_sidecar_with_the_core_alone_stops_the_run_and_says_why_no_plot(light_venv: Path, tmp_path: Path) -> None:
    """A launch from the light environment (as GuardedExecutor's user has it): its sidecar runs with that python, stops
    the diverging run, and its evidence records that no plot was drawn and which extra draws it."""
    project = make_project(tmp_path, evidence_plot=True)  # the trainer runs with the suite's python (PYTHON)
    project.env.pop("PYTHONPATH", None)
    launched = subprocess.run([str(light_venv), "-P", "-m", "guarded_sbatch", "--guard-backend", "local", "--guard-tb",
                               "runs/light", "train.sh", "--logdir", "runs/light", "--steps", "3000", "--diverge-at", "40"],
                              cwd=project.root, env=project.env, capture_output=True, text=True, timeout=120,
                              stdin=subprocess.DEVNULL)
    assert launched.returncode == 0, launched.stderr
    job_id = submitted_job_id(launched.stdout)
    output = wait_for(lambda: "FINAL_SUMMARY" in (text := project.sidecar_output(job_id)) and text, 120,
                      what="the light sidecar's FINAL_SUMMARY")
    assert "- Decision: STOP" in output and "Traceback" not in output, output[-3000:]
    evidence = json.loads((project.state_dir / "runs" / project.run_record(job_id)["run_id"] / "evidence" /
                           "evidence.json").read_text())
    assert evidence["verdict"]["decision"] == "STOP" and evidence["plot"] is None
    assert "pip install 'guarded-sbatch[plot]'" in evidence["plot_error"], evidence["plot_error"]


def test_a_package_blocked_in_this_process_counts_as_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    from guarded_sbatch.core.errors import ExitCode
    from guarded_sbatch.core.extras import MissingExtraError, installed, require

    assert installed("rich")  # the suite's environment has every extra
    monkeypatch.setitem(sys.modules, "rich", None)  # what `import rich` then refuses
    assert not installed("rich")
    with pytest.raises(MissingExtraError, match=r"pip install 'guarded-sbatch\[terminal\]'") as caught:
        require("rich", "the status table")
    assert caught.value.exit_code is ExitCode.USAGE
