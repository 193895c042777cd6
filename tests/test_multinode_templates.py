"""What the multi-node templates render for `accelerate launch` (no Slurm needed; the 2-node runs themselves are
in test_multinode_training.py): more than one process asks for accelerate's torchrun launcher (--multi_gpu:
without it, on a node with no GPU, accelerate starts a single process), a distributed type the job names
itself is kept, and every node says machine rank 0 (the c10d rendezvous ranks the nodes)."""

from __future__ import annotations

import shlex

import pytest

from guarded_sbatch.sbatch.argv import split_sbatch_argv
from guarded_sbatch.sbatch.options import effective_options
from guarded_sbatch.sbatch.script import parse_script_text
from guarded_sbatch.launch.launcher_job import PreemptionSettings, launcher_command_of, render_launcher_job


def accelerate_words(argv: list[str]) -> list[str]:
    launch = split_sbatch_argv(argv)
    command = launcher_command_of(launch)
    assert command is not None
    job = render_launcher_job(command, effective_options(launch.parsed_options, [], {}), PreemptionSettings())
    parsed = parse_script_text(job.text, None)
    assert parsed.launcher is not None and parsed.launcher.kind == "accelerate"  # the pre-flight still sees it
    words = shlex.split(parsed.launcher.text.rstrip("&").replace('"$guard_rdzv_host"', "H").replace('"$guard_rdzv_port"', "P"))
    return words[words.index("accelerate"):]


@pytest.mark.parametrize(("argv", "multi_gpu"), [
    (["--nodes", "2", "accelerate", "launch", "--num_processes", "2", "train.py"], 1),
    (["--nodes", "2", "--gpus-per-node", "4", "accelerate", "launch", "train.py"], 1),
    (["--nodes", "2", "accelerate", "launch", "--use_deepspeed", "--num_processes", "2", "train.py"], 0),
    (["--nodes", "2", "accelerate", "launch", "--multi_gpu", "--num_processes", "2", "train.py"], 1),  # not twice
    (["accelerate", "launch", "train.py", "--multi_gpu"], 0),  # one process; the program's own flag is its own
])
def test_accelerate_gets_its_torchrun_launcher_for_more_than_one_process(argv: list[str], multi_gpu: int) -> None:
    words = accelerate_words(argv)
    program = words.index("train.py")
    assert words[:program].count("--multi_gpu") == multi_gpu
    assert words[:program].count("--machine_rank=0") == 1 and "--rdzv_backend=c10d" in words[:program]
    assert words[program:] == argv[argv.index("train.py"):]  # the program's words reach it unchanged


def test_a_machine_rank_the_job_gives_is_replaced_by_the_rendezvous() -> None:
    words = accelerate_words(["--nodes", "2", "accelerate", "launch", "--machine_rank", "1", "--num_processes", "2", "t.py"])
    assert [w for w in words if w.startswith("--machine_rank")] == ["--machine_rank=0"] and "1" not in words
