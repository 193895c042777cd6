"""The one registry of scheduler backends (scheduler/__init__.py BACKENDS) and backend differences as data: every list
of backend names reads the registry, a bad name is one line with a suggestion, and no code outside scheduler/ tells
backends apart by comparing their names (it reads their traits: one BackendTraits value per backend class)."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from guarded_sbatch.core.config import load_config
from guarded_sbatch.core.errors import UsageError
from guarded_sbatch.launch.pipeline import choose_backend
from guarded_sbatch.scheduler import (
    BACKENDS, BackendTraits, backend_class, backend_names, backend_traits, get_scheduler, resolve_backend,
)
from guarded_sbatch.scheduler.interface import SchedulerDefaults, SubmitRequest
from guarded_sbatch.scheduler.slurm import sbatch_words

PACKAGE = Path(__file__).resolve().parents[1] / "wrapper" / "guarded_sbatch"


def test_the_registry_names_each_backend_once_and_makes_it() -> None:
    assert backend_names() == ("slurm", "local")
    for name in BACKENDS:
        made = get_scheduler(name)
        assert made.name == name and isinstance(made, backend_class(name)) and isinstance(made, SchedulerDefaults)
        assert backend_traits(name) is made.traits  # one value, read from the class without making one


def test_backends_differ_only_in_their_declared_traits() -> None:
    slurm, local = backend_traits("slurm"), backend_traits("local")
    differ = {field.name: (getattr(slurm, field.name), getattr(local, field.name))
              for field in dataclasses.fields(BackendTraits) if getattr(slurm, field.name) != getattr(local, field.name)}
    assert differ == {
        "free_state_queries": (False, True), "supports_requeue": (True, False), "wait_poll_s": (10.0, 1.0),
        "cancel_command": ("scancel", "cancel"), "whole_second_times": (True, False), "marks_submissions": (True, False),
        "keeps_script_copy": (True, False), "process_groups_here": (False, True), "sbatch_native": (True, False),
        "multi_node": (True, False),
    }, differ
    assert local == BackendTraits(free_state_queries=True, wait_poll_s=1.0, process_groups_here=True)  # the rest: defaults


def test_the_guards_scheduler_words_are_sbatch_words_only_in_the_slurm_backend(tmp_path: Path) -> None:
    request = SubmitRequest(script=tmp_path / "s.sh", sbatch_options=("-p", "gpu", "--comment=mine"), after="41_2",
                            comment="mine guarded-sbatch:sidecar=0000abcd", job_name="sidecar-x", output="/r/s-%j.out")
    assert sbatch_words(request) == ["-p", "gpu", "--comment=mine", "--job-name=sidecar-x", "--output=/r/s-%j.out",
                                     "--dependency=after:41_2", "--kill-on-invalid-dep=yes",
                                     "--comment=mine guarded-sbatch:sidecar=0000abcd"]
    assert sbatch_words(SubmitRequest(script=tmp_path / "s.sh", sbatch_options=("-J", "x"))) == ["-J", "x"]


@pytest.mark.parametrize(("where", "name", "says"), [
    ("flag", "slrum", "unknown backend 'slrum' (from --guard-backend); did you mean slurm? use slurm or local"),
    ("flag", "process", "unknown backend 'process' (from --guard-backend); use slurm or local"),
    ("env", "locall", "unknown backend 'locall' (from GUARDED_SBATCH_BACKEND); did you mean local? use slurm or local"),
    ("config", "lokal", "unknown backend 'lokal' (the config's `scheduler`); did you mean local? use slurm or local"),
])
def test_a_bad_backend_name_is_one_line_naming_where_it_came_from(
        where: str, name: str, says: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GUARDED_SBATCH_BACKEND", raising=False)
    with pytest.raises(UsageError) as caught:
        if where == "flag":
            choose_backend(load_config(), name)
        elif where == "env":
            monkeypatch.setenv("GUARDED_SBATCH_BACKEND", name)
            choose_backend(load_config(), None)
        else:
            resolve_backend(name)
    assert str(caught.value.message) == says


def _name_comparisons(path: Path, root: Path = PACKAGE) -> list[str]:
    """`x.backend == "slurm"`, `scheduler.name != "local"`, `backend in ("slurm", ...)`: a backend told by its name."""
    found = []
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        names = {c.value for side in sides for c in ast.walk(side) if isinstance(c, ast.Constant)}
        about = " ".join(ast.unparse(side) for side in sides)
        if names & set(BACKENDS) and ("backend" in about or ".name" in about):
            found.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_code_outside_scheduler_tells_backends_apart_by_name(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text('if record.backend == "slurm":\n    pass\nok = scheduler.name in ("local", "x")\n'
                      'kind = target.kind == "slurm"\nflag = backend == "debug"\n', encoding="utf-8")
    assert [hit.split(": ")[0] for hit in _name_comparisons(sample, tmp_path)] == ["sample.py:1", "sample.py:3"]
    found = [hit for path in sorted(PACKAGE.rglob("*.py")) if "scheduler" not in path.relative_to(PACKAGE).parts[:1]
             for hit in _name_comparisons(path)]
    assert found == [], "read the backend's traits (scheduler/interface.py BackendTraits) instead:\n" + "\n".join(found)


def test_a_backends_traits_are_read_importing_that_backend_alone() -> None:
    import subprocess
    import sys

    probe = ("import sys; from guarded_sbatch.scheduler import backend_names, backend_traits, check_backend\n"
             "check_backend('local', 'here'); backend_names(); t = backend_traits('local')\n"
             "print(t.process_groups_here, sorted(m for m in sys.modules if m.startswith('guarded_sbatch.scheduler.')))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    here, modules = out.stdout.split(" ", 1)
    assert here == "True" and "guarded_sbatch.scheduler.local" in modules and "slurm" not in modules, out.stdout
