"""The layer rules of docs/architecture.md, checked on every module-level and lazy import of the package.

Each package may import only the packages listed for it (plus itself); the package graph has no cycles.
A new arrow against the flow fails here, with the file and line that made it.
"""

from __future__ import annotations

import ast
import functools
import re
from collections import defaultdict
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[1] / "wrapper" / "guarded_sbatch"

# package -> packages it may import. The flow: cli -> launch -> scheduler ; sidecar -> sources -> judge -> actions.
ALLOWED: dict[str, set[str]] = {
    "core": set(),
    "sbatch": {"core"},  # sbatch's own grammar: its command line, #SBATCH lines, options, the script's launcher line
    "records": {"core"},  # what a launch leaves in the state folder: run records, monitor registrations, audit
    "judge": {"core", "sources"},  # sources: the point model only (what every source yields, the judge reads)
    "sources": {"core", "records"},  # records: a run's record, read for its sources
    "scheduler": {"core", "sbatch"},
    "actions": {"core", "records", "scheduler", "judge"},
    # launch: of sources the registry of kinds, their declarations and the run's source model only; of judge its policy
    # types, which a launch checks and records (the run's [judge] settings)
    "launch": {"core", "sbatch", "records", "scheduler", "sources", "judge"},
    "site": {"core", "sbatch", "launch", "scheduler"},
    "sidecar": {"core", "records", "sources", "judge", "scheduler", "actions"},
    "cli": {"core", "sbatch", "records", "launch", "scheduler", "sidecar", "sources", "judge", "actions", "site"},
    "__main__": {"cli"},
}
# narrower rules inside an allowed arrow: (importer package, imported module prefix) pairs that are refused
REFUSED: list[tuple[str, str]] = [
    ("actions", "scheduler.slurm"),  # actions use the scheduler interface, not a concrete backend
    ("actions", "scheduler.local"),
    ("actions", "judge.ordered_checks"),  # actions carry out a verdict; they never judge
]
# the judge's policy types: what it may be told (thresholds, the run's context) and the [judge] config table; at
# module level they import core and each other only, so the launch records a run's settings without the judge
JUDGE_POLICY = ("judge.policy", "judge.table", "judge.keys")
# inside an allowed arrow, the only modules it may import: the login path reads the registry of source kinds
# (sources/kinds.py) and each kind's light declaration, never a reader
ONLY: dict[tuple[str, str], tuple[str, ...]] = {
    ("launch", "sources"): ("sources.kinds", "sources.kind_", "sources.base", "sources.run_sources", "sources.place_keys",
                            "sources.points"),
    ("launch", "judge"): JUDGE_POLICY,
    ("judge", "sources"): ("sources.points",),
}
# the light modules of sources/: at module level they import core and each other only (a reader is imported
# inside the function that opens it), so importing the registry loads no reader, numpy or protobuf decoder
LIGHT_SOURCES = ("sources.kinds", "sources.kind_", "sources.base", "sources.files", "sources.run_sources",
                 "sources.place_keys", "sources.points")


def _is_light(module: str) -> bool:
    return any(module == prefix or (prefix.endswith("_") and module.startswith(prefix)) for prefix in LIGHT_SOURCES)


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE_ROOT).with_suffix("").parts
    return ".".join(p for p in parts if p != "__init__")


@functools.cache
def _tree(path: Path) -> ast.Module:
    """A module's syntax tree, parsed once for every check of this file (the checks only read it)."""
    return ast.parse(path.read_text(encoding="utf-8"))


def _imports(path: Path) -> list[tuple[str, int]]:
    tree = _tree(path)
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            found.extend((name, node.lineno) for name in names if name.startswith("guarded_sbatch."))
            if node.module == "guarded_sbatch":
                found.extend((f"guarded_sbatch.{alias.name}", node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level:
            raise AssertionError(f"{path}:{node.lineno}: relative import; write the absolute guarded_sbatch.* path")
        elif isinstance(node, ast.Import):
            found.extend((alias.name, node.lineno) for alias in node.names if alias.name.startswith("guarded_sbatch."))
    return found


def _package_of(module: str) -> str:
    return module.split(".", 1)[0] if module else ""


@functools.cache
def _edges() -> dict[tuple[str, str], list[str]]:
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for path in sorted(PACKAGE_ROOT.rglob("*.py")):
        importer = _package_of(_module_name(path))
        for target, line in _imports(path):
            imported = target.removeprefix("guarded_sbatch.")
            if (PACKAGE_ROOT / imported.split(".")[0]).is_dir() or (PACKAGE_ROOT / f"{imported.split('.')[0]}.py").is_file():
                edges[(importer, imported)].append(f"{path.relative_to(PACKAGE_ROOT.parent)}:{line}")
    return edges


def test_every_module_lives_in_a_package() -> None:
    loose = sorted(p.name for p in PACKAGE_ROOT.glob("*.py") if p.name not in {"__init__.py", "__main__.py"})
    assert loose == [], f"modules beside the packages: {loose}; put each in the package of its room"


def test_the_documented_layer_table_is_this_one() -> None:
    """docs/architecture.md's table names, for each package, exactly the packages ALLOWED lets it import."""
    doc = (PACKAGE_ROOT.parents[1] / "docs" / "architecture.md").read_text(encoding="utf-8")
    rows = {m[1]: m[2] for m in re.finditer(r"^\| `(\w+)` *\| (.*)\|$", doc, re.MULTILINE)}
    documented = {package: set(re.findall(r"`(\w+)`", row)) & set(ALLOWED) for package, row in rows.items()}
    expected = {package: allowed for package, allowed in ALLOWED.items() if package not in {"cli", "__main__"}}
    assert {p: d for p, d in documented.items() if p != "cli"} == expected
    assert rows["cli"].strip() == "everything" and ALLOWED["cli"] == set(ALLOWED) - {"cli", "__main__"}


def test_every_package_is_in_the_layer_table() -> None:
    packages = {p.name for p in PACKAGE_ROOT.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    assert packages <= set(ALLOWED), f"packages without a layer rule: {sorted(packages - set(ALLOWED))}"


def _against_rules(importer: str, imported: str) -> list[str]:
    """Why `importer` (a package) may not import `imported` (a module path below the package root), if it may not."""
    target = _package_of(imported)
    if target == importer or importer == "":
        return []
    wrong = []
    if target not in ALLOWED.get(importer, set()):
        wrong.append("")
    only = ONLY.get((importer, target))
    if only is not None and not any(imported == p or (p.endswith("_") and imported.startswith(p))
                                    or imported.startswith(p + ".") for p in only):
        wrong.append(f": only {', '.join(only)}")
    for refused_importer, prefix in REFUSED:
        if importer == refused_importer and (imported == prefix or imported.startswith(prefix + ".")):
            wrong.append(": refused")
    return wrong


def test_imports_follow_the_flow() -> None:
    wrong = [f"{importer} -> {imported}{why} ({', '.join(where)})"
             for (importer, imported), where in _edges().items() for why in _against_rules(importer, imported)]
    assert wrong == [], "imports against the layer rules:\n" + "\n".join(sorted(set(wrong)))


def test_the_launch_may_read_the_registry_of_source_kinds_and_no_reader() -> None:
    for light in ("sources.kinds", "sources.kind_tensorboard", "sources.kind_base", "sources.base", "sources.run_sources",
                  "sources.place_keys", "sources.kind_launch"):
        assert _against_rules("launch", light) == [], light
    for reader in ("sources.tensorboard", "sources.discovery", "sources.wandb_log", "sources.writers", "sidecar.loop"):
        assert _against_rules("launch", reader) != [], reader


def test_the_launch_may_read_the_judges_policy_and_never_judge() -> None:
    for light in ("judge.policy", "judge.table", "judge.keys"):
        assert _against_rules("launch", light) == [], light
    for heavy in ("judge.ordered_checks", "judge.history", "judge.checks_finite", "judge"):
        assert _against_rules("launch", heavy) != [], heavy
    assert _against_rules("judge", "sources.points") == [] and _against_rules("judge", "sources.tensorboard") != []
    wrong = []
    for module in JUDGE_POLICY:
        path = PACKAGE_ROOT / f"{module.replace('.', '/')}.py"
        for target, line in _module_level_imports(path):
            name = target.removeprefix("guarded_sbatch.")
            if not (name.startswith("core.") or name in JUDGE_POLICY):
                wrong.append(f"{module}:{line} imports {name} at module level")
    assert wrong == [], "the judge's policy types load the judge (the launch imports them):\n" + "\n".join(wrong)


def _module_level_imports(path: Path) -> list[tuple[str, int]]:
    """Imports run when the module is imported: its top level (and `if TYPE_CHECKING:` excluded)."""
    tree = _tree(path)
    found: list[tuple[str, int]] = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("guarded_sbatch."):
            found.append((node.module, node.lineno))
        elif isinstance(node, ast.Import):
            found.extend((a.name, node.lineno) for a in node.names if a.name.startswith("guarded_sbatch."))
    return found


def test_the_registry_of_source_kinds_and_their_declarations_load_no_reader() -> None:
    light = [p for p in sorted((PACKAGE_ROOT / "sources").glob("*.py")) if _is_light(_module_name(p))]
    assert {p.name for p in light} >= {"kinds.py", "kind_base.py", "kind_tensorboard.py", "kind_wandb.py", "run_sources.py"}
    wrong = []
    for path in light:
        for target, line in _module_level_imports(path):
            name = target.removeprefix("guarded_sbatch.")
            if not (name.startswith("core.") or name == "core" or _is_light(name) or name == "sources"):
                wrong.append(f"{path.relative_to(PACKAGE_ROOT)}:{line} imports {name} at module level")
    assert wrong == [], "a light module of sources/ loads a reader (import it in the function that opens it):\n" + \
        "\n".join(wrong)


def test_no_cycles_between_modules() -> None:
    graph: dict[str, set[str]] = defaultdict(set)
    known = {_module_name(p) for p in PACKAGE_ROOT.rglob("*.py")}
    for path in PACKAGE_ROOT.rglob("*.py"):
        source = _module_name(path)
        for target, _ in _imports(path):
            name = target.removeprefix("guarded_sbatch.")
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != source and not (source.startswith(name + ".") or name == ""):
                graph[source].add(name)
    cycles: list[list[str]] = []
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append(trail[trail.index(nxt):] + [nxt] if nxt in trail else [node, nxt])
            elif nxt not in state:
                visit(nxt, trail + [nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert cycles == [], "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_every_module_is_placed_in_the_architecture_doc() -> None:
    doc = (PACKAGE_ROOT.parents[1] / "docs" / "architecture.md").read_text(encoding="utf-8")
    modules = sorted(p.relative_to(PACKAGE_ROOT).as_posix() for p in PACKAGE_ROOT.rglob("*.py")
                     if p.name != "__init__.py" or p.parent == PACKAGE_ROOT)
    missing = [m for m in modules if f"`{m}`" not in doc]
    assert not missing, f"docs/architecture.md does not place these modules (add a line under 'Every module'): {missing}"


# core/ holds what the rooms share; a module of it that one room alone imports belongs in that room. The exceptions:
CORE_ONE_ROOM: dict[str, str] = {
    "config_example.py": "the configuration's example, written from core/config_schema.py (a test holds the file equal)",
}


def test_core_holds_only_what_several_rooms_share() -> None:
    importers: dict[str, set[str]] = defaultdict(set)
    for (importer, imported), _ in _edges().items():
        if imported.startswith("core."):
            importers[imported.split(".")[1]].add(importer)
    alone = {}
    for path in sorted((PACKAGE_ROOT / "core").glob("*.py")):
        rooms = importers.get(path.stem, set())
        if path.name != "__init__.py" and path.name not in CORE_ONE_ROOM and len(rooms - {"core"}) < 2 and "core" not in rooms:
            alone[path.name] = sorted(rooms)
    assert alone == {}, f"core/ modules one room alone imports (move each to its room): {alone}"
    assert all((PACKAGE_ROOT / "core" / name).is_file() for name in CORE_ONE_ROOM), "a listed exception no longer exists"


def test_no_module_basename_twice() -> None:
    by_name: dict[str, list[str]] = defaultdict(list)
    for path in PACKAGE_ROOT.rglob("*.py"):
        if path.name not in {"__init__.py"}:
            by_name[path.name].append(path.relative_to(PACKAGE_ROOT).as_posix())
    twice = {name: sorted(paths) for name, paths in sorted(by_name.items()) if len(paths) > 1}
    assert twice == {}, f"module basenames used for more than one thing (name each for what it is): {twice}"


# Modules that may start a process themselves, each with its reason; everything else goes through core/runner.py.
PROCESS_STARTERS: dict[str, str] = {
    "core/runner.py": "the one runner: run_command (a timeout), start_process (a child its owner polls), replace_process",
}
PROCESS_MODULES = {"subprocess", "multiprocessing", "pty", "concurrent.futures.process"}
PROCESS_CALLS = ("exec", "spawn", "system", "popen", "fork", "posix_spawn")


def _process_starts(path: Path) -> list[str]:
    found = []
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            found += [f"{node.lineno}: import {a.name}" for a in node.names if a.name.split(".")[0] in PROCESS_MODULES
                      or a.name in PROCESS_MODULES]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] in PROCESS_MODULES or node.module in PROCESS_MODULES:
                found.append(f"{node.lineno}: from {node.module} import ...")
            elif node.module == "os":
                found += [f"{node.lineno}: from os import {a.name}" for a in node.names if a.name.startswith(PROCESS_CALLS)]
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "os"
              and node.attr.startswith(PROCESS_CALLS)):
            found.append(f"{node.lineno}: os.{node.attr}")
    return found


def test_every_subprocess_goes_through_the_runner() -> None:
    outside = {}
    for path in sorted(PACKAGE_ROOT.rglob("*.py")):
        module = path.relative_to(PACKAGE_ROOT).as_posix()
        if module not in PROCESS_STARTERS and (found := _process_starts(path)):
            outside[module] = found
    assert outside == {}, f"processes started outside core/runner.py (use run_command / start_process): {outside}"
    assert all((PACKAGE_ROOT / module).is_file() for module in PROCESS_STARTERS), "a listed exception no longer exists"


def test_the_process_check_sees_each_way_of_starting_one(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("import os\nimport subprocess\nfrom multiprocessing import Pool\nfrom os import execvp\n"
                      "os.execv('/bin/true', ['true'])\nos.system('true')\nos.getpid()\n", encoding="utf-8")
    assert sorted(int(line.split(":")[0]) for line in _process_starts(sample)) == [2, 3, 4, 5, 6]


def test_one_module_reads_the_mount_table() -> None:
    readers = sorted(p.relative_to(PACKAGE_ROOT).as_posix() for p in PACKAGE_ROOT.rglob("*.py")
                     if any(name in p.read_text(encoding="utf-8") for name in ("mountinfo", "/proc/mounts")))
    assert readers == ["core/mounts.py"], f"the mount table is parsed in core/mounts.py only, not in {readers}"


SLURM_COMMANDS = {"sbatch", "squeue", "scontrol", "sacct", "scancel", "srun", "sinfo", "sstat", "salloc", "sprio"}


def _slurm_argvs(path: Path) -> list[str]:
    """Argument lists (list literals: the runner's argv) whose program is a Slurm command."""
    return [f"{node.lineno}: {node.elts[0].value}" for node in ast.walk(_tree(path))
            if isinstance(node, ast.List) and node.elts and isinstance(node.elts[0], ast.Constant)
            and node.elts[0].value in SLURM_COMMANDS]


def test_slurms_commands_are_run_by_the_slurm_backend_only() -> None:
    outside = {p.relative_to(PACKAGE_ROOT).as_posix(): found for p in sorted(PACKAGE_ROOT.rglob("*.py"))
               if not p.relative_to(PACKAGE_ROOT).as_posix().startswith("scheduler/slurm") and (found := _slurm_argvs(p))}
    assert outside == {}, f"Slurm commands run outside scheduler/slurm.py (add a function there): {outside}"
    assert _slurm_argvs(PACKAGE_ROOT / "scheduler" / "slurm.py"), "the check no longer sees the backend's own calls"


# The sidecar, its sources and the schedulers call what the interfaces declare (Scheduler, MetricSource, the
# settings types); probing an object for a member is allowed only on these receivers, each with its reason.
PROBING_DIRS = ("sidecar", "sources", "scheduler")
PROBING_ALLOWED: dict[tuple[str, str], str] = {
    ("sidecar/state.py", "defaults"): "a dataclass's own fields, by the names dataclasses.fields() gives",
}
PROBES = {"getattr", "hasattr"}
DYNAMIC_MEMBERS = {"__getattr__", "__getattribute__"}


def _probes(path: Path, module: str) -> list[str]:
    found = []
    for node in ast.walk(_tree(path)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in DYNAMIC_MEMBERS:
            found.append(f"{node.lineno}: def {node.name} (declare and delegate each member by name)")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in PROBES and node.args:
            receiver = ast.unparse(node.args[0])
            if (module, receiver) not in PROBING_ALLOWED:
                found.append(f"{node.lineno}: {node.func.id}({receiver}, ...)")
    return found


def test_the_sidecar_sources_and_schedulers_never_probe_project_objects() -> None:
    probing = {}
    for folder in PROBING_DIRS:
        for path in sorted((PACKAGE_ROOT / folder).rglob("*.py")):
            module = path.relative_to(PACKAGE_ROOT).as_posix()
            if found := _probes(path, module):
                probing[module] = found
    assert probing == {}, ("members probed instead of declared (add the member to the interface: "
                           f"scheduler/interface.py's Scheduler, sources/base.py's MetricSource): {probing}")
    for module, receiver in PROBING_ALLOWED:
        assert _probes_of(PACKAGE_ROOT / module, receiver), f"listed exception {module}: {receiver} no longer used"


def _probes_of(path: Path, receiver: str) -> bool:
    return any(isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in PROBES
               and node.args and ast.unparse(node.args[0]) == receiver
               for node in ast.walk(_tree(path)))


def test_the_probing_check_sees_each_form(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("import os\n"
                      "class Wrapper:\n"
                      "    def __getattr__(self, name):\n"
                      "        return getattr(self.inner, name)\n"
                      "def poll(scheduler):\n"
                      "    if hasattr(scheduler, 'states'):\n"
                      "        return getattr(scheduler, 'name', '')\n"
                      "flags = getattr(defaults, 'O_NOCTTY', 0)\n", encoding="utf-8")
    assert sorted(int(line.split(":")[0]) for line in _probes(sample, "sample.py")) == [3, 4, 6, 7, 8]
    assert sorted(int(line.split(":")[0]) for line in _probes(sample, "sidecar/state.py")) == [3, 4, 6, 7]


NOT_SCHEDULERS = {"Scheduler"}  # the protocol itself


def test_every_scheduler_and_wrapper_is_checked_against_the_protocol() -> None:
    """Each class with a `name` and `submit` (a backend or a wrapper of one) in the package has a module-level
    `_: type[Scheduler] = Class`, so mypy checks it implements every member the callers use."""
    unchecked = []
    for path in sorted(PACKAGE_ROOT.rglob("*.py")):
        tree = _tree(path)
        checked = {ast.unparse(node.value) for node in tree.body if isinstance(node, ast.AnnAssign)
                   and ast.unparse(node.annotation) == "type[Scheduler]" and node.value is not None}
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                members = {m.name for m in node.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))}
                bases = {ast.unparse(b) for b in node.bases}
                implements = "submit" in members and "state" in members or "DelegatingScheduler" in bases
                if implements and node.name not in checked and node.name not in NOT_SCHEDULERS:
                    unchecked.append(f"{path.relative_to(PACKAGE_ROOT).as_posix()}: {node.name}")
    assert unchecked == [], f"schedulers mypy does not check against Scheduler (add `_: type[Scheduler] = X`): {unchecked}"
