"""Fuzz targets shared by tests/test_harm_fuzz.py (hypothesis, bounded) and bench/fuzz_campaign.py
(the long campaign). Each target takes bytes and raises Escape when the code under test lets anything
through other than its documented error (SourceError for readers, GuardedError for launcher/config)."""

from __future__ import annotations

import io
import json
import math
import random
import shlex
import sqlite3
import struct
import zlib
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

from guarded_sbatch.core.errors import ExitCode, GuardedError
from guarded_sbatch.sources.points import MetricPoint, sanitize_points
from guarded_sbatch.sources.base import SourceError


class Escape(Exception):
    """An input made the code under test fail in a way it must not."""


HOSTILE_TOKENS = [
    b"99999999999999999999", b"-99999999999999999999", b"1" * 400, b"nan", b"NaN", b"inf", b"-inf", b"Infinity",
    b"1e308", b"1e309", b"\r", b"\r\n", b"\x00", b"\xff\xfe", b"\xc3\x28", b" " * 5000, b"\t" * 300, b"[" * 1200,
    b"{" * 1200, b'"', b",", b"=", b":", b"\n", b"step", b"global_step=", b"loss=", b"'", b"\\", b"\x1b[31m",
    b"\xef\xbb\xbf", "²".encode(), "٣".encode(), b"0x10", b"1_000", b"-0", b"+1",
]


def mutate(rng: random.Random, data: bytes, rounds: int | None = None) -> bytes:
    out = bytearray(data)
    for _ in range(rounds if rounds is not None else rng.randint(1, 6)):
        choice = rng.random()
        position = rng.randint(0, len(out)) if out else 0
        if choice < 0.35:
            token = rng.choice(HOSTILE_TOKENS)
            out[position:position] = token
        elif choice < 0.55 and out:
            out[min(position, len(out) - 1)] ^= 1 << rng.randint(0, 7)
        elif choice < 0.7 and out:
            end = min(len(out), position + rng.randint(1, 64))
            del out[position:end]
        elif choice < 0.8 and out:
            start = rng.randint(0, len(out) - 1)
            piece = out[start : start + rng.randint(1, 200)]
            out[position:position] = piece * rng.randint(1, 20)
        elif choice < 0.9:
            out[position:position] = bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 32)))
        else:
            out[position:position] = rng.choice(HOSTILE_TOKENS) * rng.randint(1, 50)
    return bytes(out[: 2 * 1024 * 1024])


# ---------------------------------------------------------------- seeds

def _textlog_seed() -> bytes:
    lines = [f"step {i} | loss {2.0 - i / 100:.4f} | lr 1e-4 | grad_norm {0.5 + i / 1000:.3f}" for i in range(30)]
    lines += [f"{{'loss': {1.5 - i / 100}, 'learning_rate': 5e-05, 'epoch': {i / 10}}}" for i in range(10)]
    lines += [f"global_step={i} train/loss={1.0 / (i + 1)}" for i in range(10)]
    return ("\n".join(lines) + "\n").encode()


def _trainer_state_seed() -> bytes:
    history = [{"step": i, "loss": 2.0 - i / 50, "learning_rate": 5e-5, "epoch": i / 10} for i in range(1, 30)]
    history.append({"step": 30, "eval_loss": 1.2, "epoch": 3.0})
    return json.dumps({"global_step": 30, "log_history": history}).encode()


def _csv_seed() -> bytes:
    rows = ["epoch,step,train_loss,val_loss,lr"]
    rows += [f"0,{i},{2.0 - i / 100},{'' if i % 5 else 1.5},{1e-3}" for i in range(40)]
    return ("\n".join(rows) + "\n").encode()


def _mlflow_metric_seed() -> bytes:
    return "".join(f"{1700000000000 + i} {2.0 - i / 100} {i}\n" for i in range(40)).encode()


def _wandb_like(payload: bytes) -> bytes:
    from guarded_sbatch.sources.wandb_log import FILE_MAGIC

    out = bytearray(FILE_MAGIC + b"\x00")
    for piece in (payload[i : i + 300] for i in range(0, len(payload), 300)):
        out += struct.pack("<IHB", zlib.crc32(bytes([1]) + piece), len(piece), 1) + piece
    return bytes(out)


def _wandb_payload() -> bytes:
    # a protobuf-ish history record: field 1 (history) holding items of key/value_json
    items = b""
    for key, value in (("loss", "0.5"), ("_step", "3"), ("lr", "1e-4")):
        item = b"\x0a" + bytes([len(key)]) + key.encode() + b"\x82\x01" + bytes([len(value)]) + value.encode()
        items += b"\x0a" + bytes([len(item)]) + item
    return b"\x0a" + bytes([len(items)]) + items


def _tb_seed() -> bytes:
    from package_extras import frame_record

    out = b""
    for step in range(20):
        tag = b"loss"
        value = b"\x0a" + bytes([len(tag)]) + tag + b"\x15" + struct.pack("<f", 2.0 - step / 10)
        summary = b"\x0a" + bytes([len(value)]) + value
        event = b"\x09" + struct.pack("<d", 1.7e9 + step) + b"\x10" + bytes([step]) + b"\x2a" + bytes([len(summary)]) + summary
        out += frame_record(event)
    return out


SEEDS: dict[str, Callable[[], bytes]] = {
    "textlog": _textlog_seed, "trainer_state": _trainer_state_seed, "csv": _csv_seed,
    "mlflow_file": _mlflow_metric_seed, "mlflow_sqlite": _mlflow_metric_seed, "wandb": _wandb_payload,
    "tensorboard": _tb_seed,
}


# ---------------------------------------------------------------- reader targets

def _check_points(points: object) -> None:
    if not isinstance(points, list):
        raise Escape(f"read_new returned {type(points).__name__}")
    for point in points:
        if not isinstance(point, MetricPoint) or not isinstance(point.value, float) or not isinstance(point.step, int):
            raise Escape(f"bad point {point!r}"[:200])
        if not -(2**53) <= point.step <= 2**53:
            raise Escape(f"step beyond what the judge handles: {point.step}")


def _read(source: object, times: int = 2) -> list[MetricPoint]:
    points: list[MetricPoint] = []
    for _ in range(times):
        try:
            got = source.read_new()  # type: ignore[attr-defined]
        except SourceError:
            continue
        except Exception as exc:
            raise Escape(f"{type(source).__name__}: {type(exc).__name__}: {exc}"[:300]) from exc
        _check_points(got)
        points += got
    return points


def read_textlog(data: bytes, work: Path) -> list[MetricPoint]:
    from guarded_sbatch.sources.textlog import TextLogSource

    path = work / "train.log"
    path.write_bytes(data)
    source = TextLogSource(path)
    points = _read(source, 1)
    with open(path, "ab") as handle:  # an appended tail, read incrementally
        handle.write(data[-200:] + b"\n")
    return points + _read(source, 1)


def read_trainer_state(data: bytes, work: Path) -> list[MetricPoint]:
    from guarded_sbatch.sources.textlog import TrainerStateSource

    path = work / "trainer_state.json"
    path.write_bytes(data)
    return _read(TrainerStateSource(path))


def read_csv(data: bytes, work: Path) -> list[MetricPoint]:
    from guarded_sbatch.sources.csvlog import LightningCsvSource

    path = work / "metrics.csv"
    path.write_bytes(data)
    return _read(LightningCsvSource(path))


def read_mlflow_file(data: bytes, work: Path) -> list[MetricPoint]:
    from guarded_sbatch.sources.mlflow import MlflowSource

    run = work / "mlruns" / "0" / "0123456789abcdef0123456789abcdef"
    (run / "metrics").mkdir(parents=True, exist_ok=True)
    (run / "meta.yaml").write_text("run_id: 0123456789abcdef0123456789abcdef\nlifecycle_stage: active\n")
    (run / "metrics" / "loss").write_bytes(data)
    return _read(MlflowSource(work / "mlruns"))


def read_mlflow_sqlite(data: bytes, work: Path) -> list[MetricPoint]:
    from guarded_sbatch.sources.mlflow import MlflowSource

    store = work / "mlflow.db"
    store.unlink(missing_ok=True)
    rng = random.Random(data)
    db = sqlite3.connect(store)
    try:
        db.execute("CREATE TABLE runs (run_uuid TEXT, lifecycle_stage TEXT, start_time INTEGER, experiment_id INTEGER)")
        db.execute("CREATE TABLE metrics (key TEXT, value, timestamp, run_uuid TEXT, step, is_nan INTEGER)")
        db.execute("INSERT INTO runs VALUES ('r1', 'active', 1, 0)")
        hostile: list[object] = [b"\xff\xfe", "text", "9" * 400, 1e30, -1e30, float("nan"), float("inf"), None,
                                 "\ud800".encode("utf-8", "surrogatepass"), 1e308, "", str(2**63), str(-(2**63) - 1),
                                 2**63 - 1, -(2**63)]
        for line in data.splitlines()[:200]:
            parts = line.split()
            row: list[object] = [p.decode("utf-8", "replace") for p in parts[:3]] + [None] * (3 - len(parts[:3]))
            if rng.random() < 0.3:
                row[rng.randrange(3)] = rng.choice(hostile)
            key = rng.choice(["loss", "eval_loss", b"\xffkey", "", "x" * 600])
            db.execute("INSERT INTO metrics VALUES (?, ?, ?, 'r1', ?, 0)", (key, row[1], row[0], row[2]))
        db.commit()
    finally:
        db.close()
    tail = data[:64]
    if tail:
        with open(store, "r+b") as handle:  # corrupt a few bytes of the file itself, sometimes
            if rng.random() < 0.2:
                handle.seek(rng.randrange(0, 4096))
                handle.write(tail)
    return _read(MlflowSource(store))


def read_wandb(data: bytes, work: Path) -> list[MetricPoint]:
    from guarded_sbatch.sources.wandb_log import WandbLogSource

    folder = work / "wandb" / "run-20260101_000000-abc"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "run-abc.wandb"
    path.write_bytes(_wandb_like(data) if not data.startswith(b":W&B") else data)
    return _read(WandbLogSource(path))


def read_tensorboard(data: bytes, work: Path) -> list[MetricPoint]:
    from guarded_sbatch.sources.tensorboard import TensorBoardSource

    folder = work / "tb"
    folder.mkdir(exist_ok=True)
    for old in folder.iterdir():
        old.unlink()
    (folder / "events.out.tfevents.1700000000.host.1.0").write_bytes(data)
    return _read(TensorBoardSource(folder))


READERS: dict[str, Callable[[bytes, Path], list[MetricPoint]]] = {
    "textlog": read_textlog, "trainer_state": read_trainer_state, "csv": read_csv, "mlflow_file": read_mlflow_file,
    "mlflow_sqlite": read_mlflow_sqlite, "wandb": read_wandb, "tensorboard": read_tensorboard,
}


# ---------------------------------------------------------------- judge

def judge(data: bytes, work: Path) -> None:
    """Raw points as hostile as a reader could ever make them -> sanitise -> history -> decide."""
    from guarded_sbatch.judge.ordered_checks import decide
    from guarded_sbatch.judge.history import MetricHistory
    from guarded_sbatch.judge.policy import JudgePolicy, RunContext

    rng = random.Random(data)
    steps = [0, 1, 2, 10**20, -(10**20), 2**63 - 1, 2**63, -(2**63), 7, 40, 10**6]
    values: list[object] = [float("nan"), float("inf"), float("-inf"), 1e308, -1e308, 5e-324, 0.0, 10**400,
                            -(10**400), 1.5, 2.5, True]
    keys = ["loss", "train/loss", "eval_loss", "eval/accuracy", "grad_norm", "lr", "loss_scale", "x" * 1000, "é"]
    raw: list[MetricPoint] = []
    step = 0
    for _ in range(rng.randint(0, 400)):
        step = rng.choice(steps) if rng.random() < 0.1 else step + rng.randint(-2, 5)
        value = rng.choice(values) if rng.random() < 0.15 else rng.gauss(2.0, 1.0) * (1 - step / 1000)
        wall = rng.choice([0.0, float("nan"), 1.7e9 + step, 1e308, -1.0])
        raw.append(MetricPoint(step, wall, rng.choice(keys), value))  # type: ignore[arg-type]
    try:
        points, _ = sanitize_points(raw)
        history = MetricHistory.from_points(points)
        policy = JudgePolicy()
        for context in (None, RunContext(job_live=True, seconds_since_last_point=rng.choice([0.0, 1e308, 3600.0])),
                        RunContext(total_steps=rng.choice([None, 1, 10**30]))):
            verdict = decide(history, policy, context)
            json.dumps(verdict.to_json(), default=str)
    except Exception as exc:
        raise Escape(f"judge: {type(exc).__name__}: {exc}"[:300]) from exc


# ---------------------------------------------------------------- launcher, pre-flight, configs

ARGV_WORDS = ["--time=", "--mem=", "--nodes=", "--gres=gpu:", "--job-name=", "--output=", "--array=", "--cpus-per-task=",
              "--ntasks-per-node=", "--dependency=afterok:", "--export=", "--comment=", "--guard-run-name=",
              "--guard-waive=", "--guard-tb=", "--chdir=", "-N", "-t", "-n", "--wrap=", "--guard-backend=local",
              "--signal=", "--partition=", "-J"]


def _words(data: bytes) -> list[str]:
    rng = random.Random(data)
    text = data.decode("utf-8", "replace")
    pieces = [p for p in text.split(" ") if p][:12]
    words = []
    for piece in pieces:
        words.append(rng.choice(ARGV_WORDS) + piece if rng.random() < 0.7 else piece)
    return words


def launcher_argv(data: bytes, work: Path) -> None:
    from guarded_sbatch.sbatch.argv import split_sbatch_argv
    from guarded_sbatch.sbatch.options import effective_options

    words = _words(data)
    try:
        launch = split_sbatch_argv([*words, "train.sh"])
        effective_options(launch.parsed_options, (), {})  # type: ignore[call-arg]
    except GuardedError:
        return
    except TypeError:
        return  # effective_options' signature differs across versions: argv parsing was reached
    except Exception as exc:
        raise Escape(f"argv {words!r}: {type(exc).__name__}: {exc}"[:300]) from exc


def launcher_script(data: bytes, work: Path) -> None:
    from guarded_sbatch.sbatch.script import parse_script_text

    text = data.decode("utf-8", "replace")
    try:
        parse_script_text("#!/bin/bash\n" + text, work / "train.sh", {})
    except GuardedError:
        return
    except Exception as exc:
        raise Escape(f"script: {type(exc).__name__}: {exc}"[:300]) from exc


CONFIG_SEED = b"""[sidecar]
fast_interval_seconds = 2.0
job_poll_seconds = 10
mem = "400M"
partition = "debug"
time = "1:00:00"
[preflight]
stat_timeout_seconds = 5
"""


def config_toml(data: bytes, work: Path) -> None:
    from guarded_sbatch.core.config import load_config

    path = work / "config.toml"
    path.write_bytes(data)
    try:
        load_config(user_path=path, env={})
    except GuardedError:
        return
    except Exception as exc:
        raise Escape(f"config: {type(exc).__name__}: {exc}"[:300]) from exc


def run_config(data: bytes, work: Path) -> None:
    from guarded_sbatch.launch.runconfig import load_run_config

    for suffix in (".json", ".toml", ".yaml"):
        path = work / f"run{suffix}"
        path.write_bytes(data)
        try:
            load_run_config(path)
        except GuardedError:
            continue
        except Exception as exc:
            raise Escape(f"run config {suffix}: {type(exc).__name__}: {exc}"[:300]) from exc


def render(data: bytes, work: Path) -> None:
    """Any value for any placeholder: UsageError, or a render whose value passed its type check."""
    from guarded_sbatch.core.errors import UsageError
    from guarded_sbatch.launch.templates import VALIDATORS, check_value

    rng = random.Random(data)
    name = rng.choice([*VALIDATORS, "SITE_THING"])
    value = data.decode("utf-8", "replace")
    try:
        out = check_value(name, value)
    except UsageError:
        return
    except Exception as exc:
        raise Escape(f"render {name}: {type(exc).__name__}: {exc}"[:300]) from exc
    if name == "SRUN_NOTE" and any(c in out for c in "\n\r"):  # a comment: words and spaces are fine there
        raise Escape(f"render {name}: a line break accepted: {out!r}"[:300])
    shell_words = ("PYTHON", "LAUNCHER", "LAUNCHER_ARGS")  # quoted words, checked below
    if name not in (*shell_words, "SIDECAR_EXTRA_SBATCH", "SRUN_NOTE") and (
            any(c in out for c in "\n\r;&|`$<>(){}'\"\\ ") ):
        raise Escape(f"render {name}: unsafe value accepted: {out!r}"[:300])
    if name in shell_words and shlex.join(shlex.split(out)) != out:
        raise Escape(f"render {name}: not canonical shell words: {out!r}"[:300])


SECRETS = ["hunter2-Pa55", "s3cr3t-t0ken-xyz", "AKIAABCDEFGHIJKLMNOP", "hf_" + "a" * 30, "sk-" + "b" * 30]


def redaction(data: bytes, work: Path) -> None:
    from guarded_sbatch.core.redact import redact, redact_args

    rng = random.Random(data)
    secret = rng.choice(SECRETS)
    filler = data.decode("utf-8", "replace")[:200].replace(secret, "")
    shapes = [f"postgres://alice:{secret}@db:5432/x", f"--wandb-key={secret}", f"--api_token={secret}",
              f"--db-password={secret}", f"--client-secret={secret}", f"--export=ALL,FOO={secret}",
              f"--comment=token={secret}", f"https://{secret}@github.com/x", f"WANDB_API_KEY={secret}",
              f'"password": "{secret}"']
    shape = rng.choice(shapes)
    text = f"{filler} {shape} {filler}"
    if secret in redact(text) or secret in " ".join(redact_args([filler, shape, filler])):
        raise Escape(f"secret survived redaction in {shape!r}")
    if shape.startswith("--") and "=" in shape:
        flag = shape.split("=", 1)[0]
        if not flag.startswith(("--export", "--comment")) and secret in redact_args([flag, secret]):
            raise Escape(f"secret survived as the word after {flag}")


def full_check(data: bytes, work: Path) -> None:
    """The whole pre-flight (`guarded-sbatch check`, local backend) on hostile argv and scripts: never exit 70."""
    from guarded_sbatch.cli.main import main

    rng = random.Random(data)
    script = work / "train.sh"
    body = data.decode("utf-8", "replace")
    script.write_text("#!/bin/bash\n#SBATCH --job-name=abc-def-ghi\n" + body[:4000] + "\npython train.py\n")
    argv = ["check", "--guard-backend", "local", *_words(data[:200]), str(script)]
    sink = io.StringIO()
    with redirect_stdout(sink), redirect_stderr(sink):
        code = main(argv)
    if code == int(ExitCode.INTERNAL):
        raise Escape(f"exit 70 for {argv!r}: {sink.getvalue()[-300:]}")
    del rng


OTHER_SEEDS: dict[str, Callable[[], bytes]] = {
    "judge": lambda: b"seed", "launcher_argv": lambda: b"1:00:00 400M 2 gpu:4 name-a-b 0-9 4",
    "launcher_script": lambda: b'#SBATCH --time=1:00:00\nA=1\nB="$A$A"\nexport C=$B\ntorchrun --nproc_per_node=4 train.py\n',
    "config_toml": lambda: CONFIG_SEED, "run_config": lambda: b'{"lr": 0.1, "model": {"name": "resnet"}}',
    "render": lambda: b"400M", "redaction": lambda: b"some log text", "full_check": lambda: b"A=1\n",
}
TARGETS: dict[str, Callable[[bytes, Path], object]] = {
    **READERS, "judge": judge, "launcher_argv": launcher_argv, "launcher_script": launcher_script,
    "config_toml": config_toml, "run_config": run_config, "render": render, "redaction": redaction,
    "full_check": full_check,
}
ALL_SEEDS = {**SEEDS, **OTHER_SEEDS}
assert set(ALL_SEEDS) == set(TARGETS)
assert math.isfinite(1.0)
