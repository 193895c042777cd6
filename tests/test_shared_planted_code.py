"""A co-worker plants `guarded_sbatch/`, `socket.py` and `json.py` in the shared submit folder; the victim runs
`sbatch train.sh` (the shim, local backend: a job, its supervisor, the sidecar and the evidence plot child),
`guarded-sbatch --version` (shim and installed entry point): none of the planted code runs as the victim."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from e2e_helpers import EXAMPLE, EXAMPLE_NAME
from shared_cluster import REPO, SharedCluster, shared_cluster_fixture  # noqa: F401 - the fixture

# A stealthy plant: it records who ran it, then hands over the real module, so the victim's own `python train.py`
# (which imports a neighbour's socket.py by Python's rule for scripts) goes on working and nothing looks wrong.
PLANTED = """import os, sys
with open({marker!r}, "a") as handle:
    handle.write(f"{{__name__}} uid={{os.getuid()}} argv={{sys.orig_argv!r}}\\n")
if __name__ in ("socket", "json"):
    import importlib
    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
    del sys.modules[__name__]
    _real = importlib.import_module(__name__)
    sys.path.insert(0, _here)
    sys.modules[__name__] = _real
    globals().update(_real.__dict__)
"""


def _plant(cluster: SharedCluster, folder: Path) -> Path:
    marker = cluster.project / "PLANTED-RAN"
    cluster.write_as(cluster.coworker, marker, "", mode="666")
    for name in ("guarded_sbatch/__init__.py", "guarded_sbatch/__main__.py", "socket.py", "json.py"):
        cluster.write_as(cluster.coworker, folder / name, PLANTED.format(marker=str(marker)))
    return marker


def _ours(marker: Path) -> list[str]:
    """Lines the planted modules wrote from a process of guarded-sbatch (the user's own `python train.py`
    importing a neighbour's json.py is Python's rule for scripts, not ours)."""
    return [line for line in marker.read_text().splitlines() if "guarded_sbatch" in line or "guarded-sbatch" in line]


def test_planted_modules_never_run_in_the_shim_the_cli_the_supervisor_or_the_sidecar(shared_cluster: SharedCluster) -> None:
    cluster = shared_cluster
    project = cluster.copy_project(EXAMPLE, "mlp")
    name = f"{EXAMPLE_NAME}-p{int(time.time()) % 100000}"
    script = project / "train.sh"
    script.write_text(script.read_text().replace(f"--job-name={EXAMPLE_NAME}\n", f"--job-name={name}\n", 1))
    marker = _plant(cluster, project)
    cluster.fast_sidecar(cluster.victim, evidence_plot=True)
    env = cluster.env(cluster.victim, GUARDED_SBATCH_BACKEND="local",
                      GUARDED_SBATCH_REAL_SBATCH=shutil.which("sbatch") or "/usr/bin/sbatch")

    for argv in ([str(REPO / "shims" / "guarded-sbatch"), "--version"],
                 [str(cluster.python.parent / "guarded-sbatch"), "--version"]):
        version = cluster.run(cluster.victim, argv, cwd=project, env=env)
        assert version.returncode == 0, version.stderr
        assert "guarded-sbatch" in version.stdout + version.stderr

    submitted = cluster.run(cluster.victim, [str(REPO / "shims" / "sbatch"), "train.sh", "--steps", "3000",
                                             "--diverge-at", "40", "--step-seconds", "0.01"], cwd=project, env=env,
                            umask="022")  # the run's files its own: a STOP is never read from files others can write
    assert submitted.returncode == 0, submitted.stderr
    assert submitted.stdout.startswith("Submitted batch job "), submitted.stdout
    job_id = submitted.stdout.split()[-1]
    state = cluster.victim.home / ".local" / "state" / "guarded-sbatch"
    runs = state / "runs"
    deadline = time.time() + 150
    record: dict = {}
    while time.time() < deadline:
        found = [json.loads(p.read_text()) for p in runs.glob("*/run.json")]
        record = next((r for r in found if r.get("job_id") == job_id), {})
        sidecar = state / "local-jobs" / str(record.get("sidecar_id", "none")) / "job.json"
        if sidecar.is_file() and json.loads(sidecar.read_text()).get("state") in ("COMPLETED", "FAILED", "CANCELLED"):
            break
        time.sleep(0.5)
    else:
        raise AssertionError(f"the sidecar of job {job_id} did not end in time")
    run_folder = runs / record["run_id"]
    output = "".join(p.read_text(errors="replace") for p in run_folder.glob("sidecar-*.out"))
    assert "FINAL_SUMMARY" in output and "Decision: STOP" in output, output[-3000:]
    assert (run_folder / "evidence" / "metrics.png").stat().st_size > 1000  # the plot child ran, from its own code
    assert _ours(marker) == [], marker.read_text()


def test_no_python_child_is_started_without_safe_path() -> None:
    """The class of the bug: every `-m` / `-c` child in the package, the shims and the job templates goes through
    core/pychild.py's `python -P` (a new one added the old way fails here)."""
    import re

    offenders = []
    for path in sorted((REPO / "wrapper" / "guarded_sbatch").rglob("*.py")):
        text = path.read_text()
        for match in re.finditer(r"sys\.executable\s*,\s*[\"']-[mc][\"']", text):
            offenders.append(f"{path.relative_to(REPO)}: {match.group(0)}")
    templates = [*(REPO / "shims").iterdir(), *(REPO / "wrapper" / "guarded_sbatch" / "sbatch_templates").iterdir()]
    for path in templates:
        for line in path.read_text().splitlines():
            if re.search(r'(\}"?|python3?|PYTHON\}\})\s+-[mc]\s', line) and not line.lstrip().startswith("#"):
                offenders.append(f"{path.relative_to(REPO)}: {line.strip()}")
    assert offenders == []
