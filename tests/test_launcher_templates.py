"""Jobs built from a launcher command: every template with every option, rendered and checked by bash and by
the pre-flight's own script parser; the preemption logic run for real by bash (no Slurm needed)."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from guarded_sbatch.core.config import load_config
from guarded_sbatch.core.errors import UsageError
from guarded_sbatch.sbatch.argv import split_sbatch_argv
from guarded_sbatch.launch.checks.regressors import world_size
from guarded_sbatch.launch.launcher_job import (
    PreemptionSettings,
    build_launcher_job,
    launcher_command_of,
    parse_launcher_command,
    render_launcher_job,
)
from guarded_sbatch.sbatch.options import effective_options
from guarded_sbatch.sbatch.script import parse_script_text
from guarded_sbatch.launch.templates import PLACEHOLDER

REPO = Path(__file__).resolve().parents[1]
ODD_ARG = '--name=it\'s a "run" $HOME `x`'  # quotes, spaces and shell syntax must reach the program unchanged

# (sbatch options + launcher command, expected launcher kind, expected world size)
CASES = [
    (["--nodes", "2", "--gpus-per-node", "8", "torchrun", "train.py", "--config", "c.yaml"], "torchrun", 16),
    (["--nodes=2", "--gpus-per-node=8", "torchrun", "--nproc-per-node", "4", "train.py", "--config", "c.yaml"], "torchrun", 8),
    (["-N", "3", "torchrun", "--nproc_per_node=2", "--max-restarts=1", "-m", "pkg.train", "--config", "c.yaml"], "torchrun", 6),
    (
        ["--nodes", "2", "--gres", "gpu:4", "python3", "-u", "-m", "torch.distributed.run", "train.py", "--config", "c.yaml"],
        "torchrun",
        8,
    ),
    (["--nodes", "2", "--gpus-per-node", "4", "accelerate", "launch", "train.py", "--config", "c.yaml"], "accelerate", 8),
    (
        [
            "--nodes",
            "2",
            "accelerate",
            "launch",
            "--num_processes",
            "6",
            "--mixed_precision",
            "bf16",
            "train.py",
            "--config",
            "c.yaml",
        ],
        "accelerate",
        6,
    ),
    (
        ["--nodes", "2", "--gpus-per-node", "4", "deepspeed", "train.py", "--config", "c.yaml", "--deepspeed", "ds.json"],
        "deepspeed",
        8,
    ),
    (["--nodes", "1", "deepspeed", "--num_gpus", "2", "train.py", "--config", "c.yaml"], "deepspeed", 2),
    (["python", "train.py", "--config", "c.yaml"], "python", 1),
    (["--nodes", "2", "--ntasks-per-node", "4", "python3", "train.py", "--config", "c.yaml"], "python", 8),
    (["--ntasks", "2", "python", "-m", "pkg.train", "--config", "c.yaml"], "python", 2),
]


def render(argv: list[str], settings: PreemptionSettings = PreemptionSettings(), template_dirs: tuple[Path, ...] = ()):
    launch = split_sbatch_argv(argv)
    command = launcher_command_of(launch)
    assert command is not None
    options = effective_options(launch.parsed_options, [], {})
    return launch, render_launcher_job(command, options, settings, template_dirs)


@pytest.mark.parametrize(("argv", "kind", "world"), CASES, ids=[" ".join(c[0])[:60] for c in CASES])
@pytest.mark.parametrize("settings", [PreemptionSettings(300, 3), PreemptionSettings(45, 0)], ids=["default", "small"])
def test_every_template_renders_to_valid_bash_with_the_right_world_size(
    argv: list[str], kind: str, world: int, settings: PreemptionSettings, tmp_path: Path
) -> None:
    launch, job = render([*argv, ODD_ARG], settings)
    assert (
        job.template_name == f"{kind}.sbatch"
        and job.template_path.parent == REPO / "wrapper" / "guarded_sbatch" / "sbatch_templates"
    )
    assert not PLACEHOLDER.search(job.text), "a placeholder was left unfilled"
    script = tmp_path / "job.sbatch"
    script.write_text(job.text)
    checked = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, timeout=10)
    assert checked.returncode == 0, checked.stderr
    assert f"#SBATCH --signal=B:USR1@{settings.signal_margin_s}\n" in job.text
    assert f"guard_max_requeues={settings.max_requeues}\n" in job.text
    parsed = parse_script_text(job.text, script)
    assert parsed.launcher is not None and parsed.launcher.kind == kind and not parsed.other_launchers
    assert parsed.launcher.config_path == "c.yaml"
    directives = [(f"line {d.line_number}", o) for d in parsed.directives for o in d.options]
    options = effective_options(launch.parsed_options, directives, {})
    assert world_size(options, parsed.launcher, None)[0] == world
    # the program's arguments come back word for word when bash splits the line
    words = shlex.split(parsed.launcher.text.rstrip("&"))
    assert words[-1] == ODD_ARG
    assert words.count("--config") == 1


def test_options_the_template_sets_are_taken_out_of_the_users_words() -> None:
    _, job = render(["--nodes", "2", "torchrun", "--nproc-per-node", "4", "--nnodes", "2", "train.py", "--nnodes", "9"])
    line = next(line for line in job.text.splitlines() if "--rdzv-id" in line)
    assert "--nproc-per-node=4" in job.text and "--nnodes=2" in job.text
    assert line.strip().endswith("train.py --nnodes 9 &")  # the program's own --nnodes is left alone


def test_node_range_becomes_torchrun_elastic_range() -> None:
    _, job = render(["--nodes", "2-4", "torchrun", "train.py"])
    assert "--nnodes=2:4" in job.text


def test_rendezvous_port_and_host_come_from_the_allocation() -> None:
    _, job = render(["--nodes", "2", "torchrun", "train.py"])
    assert 'scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1' in job.text
    assert 'srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1' in job.text
    port_line = next(line for line in job.text.splitlines() if line.startswith("guard_rdzv_port="))
    ports = set()
    for job_id in ("1", "2", "12345"):
        result = subprocess.run(
            ["bash", "-c", f"{port_line}; echo $guard_rdzv_port"],
            capture_output=True,
            text=True,
            env={"SLURM_JOB_ID": job_id, "PATH": os.environ["PATH"]},
            timeout=10,
        )
        ports.add(int(result.stdout))
    assert len(ports) == 3 and all(20000 <= port < 60000 for port in ports)


def test_unfilled_placeholder_is_refused_and_site_templates_come_first(tmp_path: Path) -> None:
    site = tmp_path / "site-templates"
    site.mkdir()
    (site / "torchrun.sbatch").write_text("#!/bin/bash\n#SBATCH --partition={{SITE_PARTITION}}\n{{LAUNCHER}} {{LAUNCHER_ARGS}}\n")
    with pytest.raises(UsageError, match="SITE_PARTITION"):
        render(["torchrun", "train.py"], template_dirs=(site,))
    (site / "torchrun.sbatch").write_text(
        "#!/bin/bash\n#SBATCH --partition=gpu\nsrun {{LAUNCHER}} --nproc-per-node={{NPROC_PER_NODE}} {{LAUNCHER_ARGS}}\n"
    )
    _, job = render(["torchrun", "train.py"], template_dirs=(site,))
    assert job.template_path == site / "torchrun.sbatch"
    assert job.text == "#!/bin/bash\n#SBATCH --partition=gpu\nsrun torchrun --nproc-per-node=1 train.py\n"


def test_margin_must_be_shorter_than_the_time_limit() -> None:
    with pytest.raises(UsageError, match="not shorter than the time limit"):
        render(["--time", "5", "torchrun", "train.py"], PreemptionSettings(300, 1))
    _, job = render(["--time", "5", "torchrun", "train.py"], PreemptionSettings(60, 1))
    assert "#SBATCH --signal=B:USR1@60" in job.text


def test_guard_options_win_over_the_config(tmp_path: Path) -> None:
    user = tmp_path / "user.toml"
    user.write_text("[launcher]\nsignal_margin_seconds = 120\nmax_requeues = 5\n")
    config = load_config(user_path=user, env={})
    assert (config.launcher.signal_margin_s, config.launcher.max_requeues) == (120, 5)
    launch = split_sbatch_argv(["torchrun", "train.py"])
    job = build_launcher_job(launch, launcher_command_of(launch), config, env={})  # type: ignore[arg-type]
    assert "#SBATCH --signal=B:USR1@120" in job.text and "guard_max_requeues=5" in job.text
    launch = split_sbatch_argv(["--guard-signal-margin", "30", "--guard-max-requeues=0", "torchrun", "train.py"])
    job = build_launcher_job(launch, launcher_command_of(launch), config, env={})  # type: ignore[arg-type]
    assert "#SBATCH --signal=B:USR1@30" in job.text and "guard_max_requeues=0" in job.text
    user.write_text("[launcher]\nmax_requeues = -1\n")
    with pytest.raises(UsageError, match="max_requeues"):
        load_config(user_path=user, env={})


def test_what_counts_as_a_launcher(tmp_path: Path) -> None:
    assert parse_launcher_command("train.sh", [], tmp_path) is None
    assert parse_launcher_command("/opt/venv/bin/torchrun", ["t.py"], tmp_path).kind == "torchrun"  # type: ignore[union-attr]
    assert parse_launcher_command("python3.11", ["-m", "accelerate.commands.launch", "t.py"], tmp_path).kind == "accelerate"  # type: ignore[union-attr]
    assert parse_launcher_command("python", ["-m", "deepspeed", "t.py"], tmp_path).kind == "deepspeed"  # type: ignore[union-attr]
    (tmp_path / "python").write_text("#!/bin/bash\necho a script called python\n")
    assert parse_launcher_command("python", ["t.py"], tmp_path) is None  # a file of that name is a script
    with pytest.raises(UsageError, match="accelerate launch"):
        parse_launcher_command("accelerate", ["config"], tmp_path)
    with pytest.raises(UsageError, match="needs a program"):
        parse_launcher_command("python3", [], tmp_path)


def _cli(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "guarded_sbatch", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "GUARDED_SBATCH_STATE_DIR": str(cwd / "state"), **(env or {})},
        stdin=subprocess.DEVNULL,
    )


def test_print_script_prints_the_rendering_and_submits_nothing(tmp_path: Path) -> None:
    argv = ["--nodes", "2", "--gpus-per-node", "8", "--time", "12:00:00", "torchrun", "train.py", "--config", "configs/x.yaml"]
    for flag in ("--guard-print-script", "--print-script"):
        result = _cli([flag, "--guard-signal-margin", "90", *argv], tmp_path)
        assert result.returncode == 0, result.stderr
        _, job = render(argv, PreemptionSettings(90, load_config(env={}).launcher.max_requeues))
        assert result.stdout == job.text
        assert result.stderr == ""
    assert not (tmp_path / "state" / "runs").exists()
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/bash\n#SBATCH --time=1\npython train.py\n")
    result = _cli(["--print-script", "train.sh"], tmp_path)
    assert result.returncode == 0 and result.stdout == script.read_text()


def _python_job(tmp_path: Path, trainer: str, settings: PreemptionSettings = PreemptionSettings(60, 2)) -> Path:
    (tmp_path / "trainer.py").write_text(trainer)
    _, job = render([sys.executable, "trainer.py"], settings)
    script = tmp_path / "job.sbatch"
    script.write_text(job.text)
    return script


TRAINER_CHECKPOINTS_ON_USR1 = """
import os, signal, sys, time
got = []
signal.signal(signal.SIGUSR1, lambda *_: got.append(1))
open("started", "w").write(" ".join(sorted(k for k in os.environ if k.startswith("SLURM_"))))
deadline = time.time() + 20
while not got and time.time() < deadline:
    time.sleep(0.05)
open("checkpoint", "w").write("saved" if got else "timeout")
sys.exit(3)
"""


def _run_job(script: Path, env: dict[str, str], *, signal_after_start: bool) -> subprocess.CompletedProcess[str]:
    process = subprocess.Popen(
        ["bash", str(script)],
        cwd=script.parent,
        env={"PATH": os.environ["PATH"], **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    started = script.parent / "started"
    deadline = time.monotonic() + 20
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert started.exists(), "the trainer never started"
    if signal_after_start:
        process.send_signal(signal.SIGUSR1)  # what Slurm's --signal=B:USR1 does: only the batch shell gets it
    stdout, stderr = process.communicate(timeout=30)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def test_usr1_to_the_batch_shell_reaches_the_trainer_and_its_exit_status_is_kept(tmp_path: Path) -> None:
    script = _python_job(tmp_path, TRAINER_CHECKPOINTS_ON_USR1)
    result = _run_job(script, {}, signal_after_start=True)
    assert (tmp_path / "checkpoint").read_text() == "saved"
    assert result.returncode == 3, result.stderr  # the trainer's own status, not the 138 of the cut-short wait
    assert "asking the trainer to checkpoint" in result.stderr and "not a Slurm job; not requeued" in result.stderr


def test_a_local_backend_job_is_not_requeued_though_it_has_slurm_variables(tmp_path: Path) -> None:
    script = _python_job(tmp_path, TRAINER_CHECKPOINTS_ON_USR1)
    local = {"SLURM_JOB_ID": "7", "GUARDED_SBATCH_JOB_ID": "7", "SLURM_CLUSTER_NAME": "local"}  # as scheduler/local.py
    result = _run_job(script, local, signal_after_start=True)
    assert (tmp_path / "checkpoint").read_text() == "saved" and result.returncode == 3, result.stderr
    assert "not a Slurm job; not requeued" in result.stderr and "requeueing" not in result.stderr


def test_past_the_requeue_limit_the_trainer_runs_on(tmp_path: Path) -> None:
    script = _python_job(tmp_path, TRAINER_CHECKPOINTS_ON_USR1.replace("+ 20", "+ 1.5"), PreemptionSettings(60, 1))
    result = _run_job(script, {"SLURM_JOB_ID": "999999", "SLURM_RESTART_COUNT": "1"}, signal_after_start=True)
    assert (tmp_path / "checkpoint").read_text() == "timeout"  # not signalled: it kept its remaining minutes
    assert result.returncode == 3 and "requeue limit (1) reached" in result.stderr
    assert "requeueing" not in result.stderr


def test_step_variables_leaked_from_a_submitting_step_are_dropped(tmp_path: Path) -> None:
    script = _python_job(tmp_path, TRAINER_CHECKPOINTS_ON_USR1.replace("+ 20", "+ 0.1"))
    leaked = {
        "SLURM_STEP_ID": "0",
        "SLURM_STEPID": "0",
        "SLURM_STEP_NODELIST": "n1",
        "SLURM_SRUN_COMM_PORT": "4242",
        "SLURM_CPU_BIND": "quiet,mask_cpu:0x1",
        "SLURM_JOB_NAME": "kept",
    }
    result = _run_job(script, leaked, signal_after_start=False)
    assert result.returncode == 3, result.stderr
    assert (tmp_path / "started").read_text() == "SLURM_JOB_NAME"
    # without a step id nothing is touched: those variables are the job's own
    (tmp_path / "started").unlink()
    result = _run_job(script, {"SLURM_CPU_BIND": "quiet"}, signal_after_start=False)
    assert (tmp_path / "started").read_text() == "SLURM_CPU_BIND"
