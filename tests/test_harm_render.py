"""Hostile values for every placeholder of every shipped template: each render is refused (UsageError,
exit 2) or safe (`bash -n` passes, and running the script with stub commands creates no marker file)."""

from __future__ import annotations

import shlex
import stat
import subprocess
from pathlib import Path

import pytest

from guarded_sbatch.core.errors import ExitCode, UsageError
from guarded_sbatch.records.registry import RunRecord
from guarded_sbatch.launch.submit import SidecarResources, render_sidecar_script
from guarded_sbatch.launch.templates import builtin_templates_dir, check_run_name, placeholders, render_template

GOOD = {
    "TRAIN_JOB_ID": "123", "SIDECAR_JOB_NAME": "sidecar-a-b-c", "SIDECAR_OUTPUT": "/tmp/x/sidecar-%j.out",
    "SIDECAR_CPUS": "1", "SIDECAR_MEM": "400M", "SIDECAR_EXTRA_SBATCH": "#SBATCH --partition=debug",
    "PYTHON": "/bin/true", "RUN_DIR": "/tmp/x/run-123", "LAUNCHER": "true",
    "LAUNCHER_ARGS": shlex.join(["train.py", "--lr", "0.1"]), "SIGNAL_MARGIN_SECONDS": "120",
    "MAX_REQUEUES": "1", "NNODES": "1", "NPROC_PER_NODE": "1", "NUM_PROCESSES": "1", "SRUN": "",
    "SRUN_NOTE": ", one process",
}


def hostile_values(marker: Path) -> list[str]:
    m = shlex.quote(str(marker))
    return [
        f"x\ntouch {m}", f"x\rtouch {m}", f"$(touch {m})", f"`touch {m}`", f"x; touch {m}", f"x && touch {m}",
        f"x' ; touch {m}; '", f'x" ; touch {m}; "', f"x | touch {m}", f"x\n#SBATCH --wrap='touch {m}'",
        f"${{IFS}}touch${{IFS}}{m}", f"400M\ntouch {m}", f"debug\ntouch {m}", f"1:00:00\ntouch {m}",
        "\x00", "", " ", "1" * 5000, "²", "-1", "../../etc", f"a\u2028touch {m}",
    ]


def _stub_path(tmp: Path) -> str:
    stubs = tmp / "stubs"
    stubs.mkdir(exist_ok=True)
    for name in ("scontrol", "srun", "torchrun", "accelerate", "deepspeed", "python", "python3", "sleep", "wait"):
        path = stubs / name
        path.write_text("#!/bin/sh\nexit 0\n")
        path.chmod(stat.S_IRWXU)
    return f"{stubs}:/usr/bin:/bin"


def _templates() -> list[Path]:
    return sorted(builtin_templates_dir().glob("*.sbatch"))


@pytest.mark.parametrize("template", _templates(), ids=lambda p: p.name)
def test_every_placeholder_refuses_or_renders_safely(template: Path, tmp_path: Path) -> None:
    text = template.read_text()
    marker = tmp_path / "MARKER"
    env = {"PATH": _stub_path(tmp_path), "SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "n1", "HOME": str(tmp_path)}
    refused = rendered = 0
    for name in sorted(placeholders(text)):
        for hostile in hostile_values(marker):
            values = {key: GOOD.get(key, "1") for key in placeholders(text)}
            values[name] = hostile
            try:
                script = render_template(text, values, template_name=template.name)
            except UsageError as exc:
                assert exc.exit_code == ExitCode.USAGE and "\n" not in str(exc)
                refused += 1
                continue
            rendered += 1
            path = tmp_path / "job.sh"
            path.write_text(script)
            assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0, (name, hostile)
            subprocess.run(["bash", str(path)], env=env, cwd=tmp_path, capture_output=True, timeout=20)
            assert not marker.exists(), (template.name, name, hostile)
    assert refused > 0


@pytest.mark.parametrize("field", ["run_name", "mem", "partition", "account", "qos", "time_limit", "cpus"])
def test_hostile_sidecar_values_are_refused_before_render(field: str, tmp_path: Path) -> None:
    marker = tmp_path / "MARKER"
    template = (builtin_templates_dir() / "sidecar.sbatch").read_text()
    for hostile in hostile_values(marker):
        record = RunRecord(run_id="r-1", run_name="good-run-name", backend="slurm", job_id="1")
        resources = SidecarResources()
        if field == "run_name":
            record.run_name = hostile
        else:
            resources = SidecarResources(**{field: hostile})
        try:
            script = render_sidecar_script(template, record, resources, python="/bin/true")
        except UsageError:
            continue
        assert hostile.strip() == "" and field != "run_name", (field, hostile)  # empty optional values: not set
        path = tmp_path / "s.sh"
        path.write_text(script)
        assert subprocess.run(["bash", "-n", str(path)]).returncode == 0
        subprocess.run(["bash", str(path)], cwd=tmp_path, capture_output=True, timeout=20,
                       env={"PATH": _stub_path(tmp_path)})
        assert not marker.exists()


def test_run_name_pattern() -> None:
    assert check_run_name("cifar10-resnet18-bs128") == "cifar10-resnet18-bs128"
    for bad in (None, "", "a b", "a\nb", "x" * 200, "-leading", "a/b", "²"):
        with pytest.raises(UsageError):
            check_run_name(bad)
