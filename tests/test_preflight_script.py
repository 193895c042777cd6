"""Batch-script parsing: #SBATCH lines, precedence, launcher lines, and bad input — no shell ever runs."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest

from guarded_sbatch.core.config import Config
from guarded_sbatch.core.errors import UsageError
from guarded_sbatch.sbatch.argv import split_sbatch_argv
from guarded_sbatch.launch.preflight import run_preflight
from guarded_sbatch.sbatch.options import effective_options, parse_time_limit
from guarded_sbatch.sbatch.script import parse_script, parse_script_text
from guarded_sbatch.sbatch.shell_words import Word, next_command


def write(tmp_path: Path, text: str | bytes, name: str = "train.sh") -> Path:
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def test_sbatch_precedence_command_line_over_env_over_script(tmp_path: Path) -> None:
    script = parse_script(
        write(tmp_path, "#!/bin/bash\n#SBATCH -p cpu\n#SBATCH --time=10\n#SBATCH -J from-script\npython x.py\n")
    )
    directives = [(f"line {d.line_number}", o) for d in script.directives for o in d.options]
    launch = split_sbatch_argv(["--time", "2:00:00", "train.sh"])
    options = effective_options(launch.parsed_options, directives, {"SBATCH_PARTITION": "gpu", "SBATCH_TIMELIMIT": "30"})
    assert options.get("partition") == "gpu" and options.source("partition") == "SBATCH_PARTITION"
    assert options.time_limit_s == 7200 and options.source("time") == "command line"
    assert options.job_name == "from-script"


@pytest.mark.parametrize(
    ("text", "seconds"),
    # Slurm stores whole minutes, rounded up (10:30 -> 11 min); 0 and UNLIMITED mean no limit; "1-" is one day
    [
        ("90", 5400),
        ("10:30", 660),
        ("2:00:00", 7200),
        ("1-12", 129600),
        ("1-12:30", 131400),
        ("2-00:00:05", 172860),
        ("UNLIMITED", None),
        ("INFINITE", None),
        ("0", None),
        ("-1", None),
        ("1-", 86400),
        ("0:30", 60),
    ],
)
def test_time_limit_formats(text: str, seconds: int | None) -> None:
    assert parse_time_limit(text) == seconds


@pytest.mark.parametrize("bad", ["1:2:3:4", "ten", "1-2:3:4:5", "1h", "", " 5", "²", "١٢", "5:", ":5"])
def test_bad_time_limits(bad: str) -> None:
    with pytest.raises(UsageError, match="is not a Slurm time"):
        parse_time_limit(bad)


@pytest.mark.parametrize(("bad", "why"), [("-5", "negative"), ("9" * 5000, "too large"), ("35791394", "too large")])
def test_time_limits_slurm_would_wrap(bad: str, why: str) -> None:
    with pytest.raises(UsageError, match=why) as caught:
        parse_time_limit(bad)
    assert len(str(caught.value)) < 300


def test_job_shape_from_options(tmp_path: Path) -> None:
    launch = split_sbatch_argv(["-N", "2", "--ntasks=8", "--gres=gpu:a100:4,tmpdisk:100", "x.sh"])
    options = effective_options(launch.parsed_options, [], {})
    assert (options.nodes, options.tasks_per_node, options.gpus_per_node) == (2, 4, 4)


@pytest.mark.parametrize(
    ("line", "kind", "program", "config"),
    [
        ("python train.py --config configs/a.yaml", "python", "train.py", "configs/a.yaml"),
        ("python3 -u -m project.train --cfg=c.json", "python", "project.train", "c.json"),
        ("torchrun --standalone --nproc_per_node=8 train.py c.yaml", "torchrun", "train.py", "c.yaml"),
        ("python -m torch.distributed.run --nnodes 2 --nproc-per-node 4 train.py -c x.toml", "torchrun", "train.py", "x.toml"),
        (
            "accelerate launch --multi_gpu --num_processes 8 --mixed_precision bf16 train.py --config_file r.yaml",
            "accelerate",
            "train.py",
            "r.yaml",
        ),
        ("deepspeed --num_gpus 4 train.py --deepspeed ds.json --config c.yaml", "deepspeed", "train.py", "c.yaml"),
        ("srun -N 2 --ntasks-per-node=4 -l python train.py --config=c.yaml", "python", "train.py", "c.yaml"),
        ("exec env OMP_NUM_THREADS=4 time python train.py --config-name base --config-path conf", "python", "train.py", None),
    ],
)
def test_launcher_lines(tmp_path: Path, line: str, kind: str, program: str, config: str | None) -> None:
    script = parse_script(write(tmp_path, f"#!/bin/bash\nmodule load cuda\n{line}\n"))
    assert script.launcher is not None
    assert (script.launcher.kind, script.launcher.program, script.launcher.config_path) == (kind, program, config)


def test_hydra_and_variables_and_continuations(tmp_path: Path) -> None:
    text = ("#!/bin/bash\nDATA=/scratch/coco\nexport LR=3e-4\nsrun python train.py --config-name base \\\n  "
            "data.root=$DATA optimizer.lr=${LR} out=$(date +%s)\n")
    script = parse_script(write(tmp_path, text))
    launcher = script.launcher
    assert launcher is not None and launcher.line_number == 4
    assert launcher.hydra_config_name == "base"
    assert launcher.overrides["data.root"] == "/scratch/coco" and launcher.overrides["optimizer.lr"] == "3e-4"
    assert launcher.unresolved_args == ("out=$(date +%s)",)
    assert "LR" in script.exported


def test_ignored_directives_are_reported(tmp_path: Path) -> None:
    text = "#!/bin/bash\n#SBATCH -p gpu\n#sbatch --qos=high\n##SBATCH --mem=1G\necho start\n#SBATCH --time=5\npython t.py\n"
    script = parse_script(write(tmp_path, text))
    assert [o.name for o in script.directive_options] == ["partition"]
    assert [(d.line_number, d.why.split(":")[0]) for d in script.ignored_directives] == [
        (3, "not spelled exactly '#SBATCH'"),
        (6, "after the first command"),
    ]


def test_shell_words_never_run_anything(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    line = f"python train.py --name 'a;b' \"$(touch {marker})\" `touch {marker}`; touch {marker}"
    commands: list[list[Word]] = []
    rest = line
    while rest.strip():  # one simple command at a time, as the script reader takes them
        items, end = next_command(rest, {})
        commands.append([item for item in items if isinstance(item, Word)])
        rest = rest[end:]
    assert [w.text for w in commands[0]][:4] == ["python", "train.py", "--name", "a;b"]
    assert commands[0][4].unresolved and commands[0][5].unresolved
    assert [w.text for w in commands[1]] == ["touch", str(marker)]
    parse_script(write(tmp_path, f"#!/bin/bash\n{line}\n"))
    assert not marker.exists()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "is empty"),
        (b"   \n\n", "is empty"),
        (b"\x7fELF\x02\x01\x01\x00\x00\x00", "binary file"),
        (b"#!/bin/bash\n\xff\xfe bad\n", "not UTF-8"),
        (b"python train.py\n", "must start with #!"),
        (b"#!/bin/bash\n#SBATCH -t 5\r\npython t.py\r\n", "DOS line breaks"),
        (b"#!/bin/bash\n#SBATCH --job-name='unclosed\npython t.py\n", "unmatched '"),
        (b"#!/bin/bash\n#SBATCH partition=gpu\n", "'partition=gpu' is not an sbatch option"),
        (b"#!/bin/bash\n#SBATCH : -N1\n", "starting with ':'"),
        (b"#!/bin/bash\n#SBATCH --frobnicate\n", "unknown sbatch option --frobnicate"),
        (b"#!/bin/bash\n#SBATCH -p gpu extra\n", "'extra' is not an sbatch option"),
        (b"#!/bin/bash\n#SBATCH --time=soon\n", "is not a Slurm time"),
        (b'#!/bin/bash\npython train.py --name "unclosed\n', "unbalanced double quote"),
    ],
)
def test_bad_scripts_give_one_clear_line(tmp_path: Path, content: bytes, message: str) -> None:
    path = write(tmp_path, content)
    with pytest.raises(UsageError, match=message) as caught:
        run_preflight(split_sbatch_argv([str(path)]), Config(), None, cwd=tmp_path, env={})
    assert "\n" not in str(caught.value)
    if "line" in message or "#SBATCH" in message:
        assert "line 2" in str(caught.value)


def test_missing_unreadable_and_folder_scripts(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="does not exist"):
        parse_script(tmp_path / "nope.sh")
    with pytest.raises(UsageError, match="is a folder"):
        parse_script(tmp_path)
    locked = write(tmp_path, "#!/bin/bash\npython t.py\n", "locked.sh")
    locked.chmod(0)
    try:
        if os.geteuid() != 0:
            with pytest.raises(UsageError, match="cannot read batch script"):
                parse_script(locked)
    finally:
        locked.chmod(0o644)


def test_paths_and_names_with_shell_metacharacters(tmp_path: Path) -> None:
    weird = tmp_path / "my dir; $(rm -rf ~)\n'quoted'"
    weird.mkdir()
    script = weird / "train $(x).sh"
    script.write_text(
        '#!/bin/bash\n#SBATCH --job-name="a b;c"\n#SBATCH --output="out dir/%j.log"\npython train.py --config "c; d.yaml"\n'
    )
    report = run_preflight(split_sbatch_argv([str(script)]), Config(), None, cwd=weird, env={})
    checks = {r.name: r for r in report.results}
    assert "spaces or characters" in checks["run-name"].finding
    assert "out dir" in checks["paths"].finding
    assert report.blocked
    assert shlex.split(report.launch_command) == ["guarded-sbatch", str(script)]  # quoted for bash, round-trips


def test_wrap_is_checked_as_a_script(tmp_path: Path) -> None:
    report = run_preflight(
        split_sbatch_argv(["--wrap", "python train.py --config c.yaml", "-J", "x"]), Config(), None, cwd=tmp_path, env={}
    )
    assert any("c.yaml" in line for r in report.results for line in (r.finding, *r.evidence))


def test_script_text_parser_keeps_line_numbers() -> None:
    script = parse_script_text("#!/bin/sh\n\n\n#SBATCH -t 5\n", Path("x.sh"))
    assert script.directives[0].line_number == 4
