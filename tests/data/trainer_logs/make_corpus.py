"""Write the trainer-log corpus: for each format, logs printed with the producer's own format strings
(see SOURCES.md) and, beside each, the (step, key, value) triples it printed and how it ends.

The expected triples come from what this script printed, never from the parser. Run it from
anywhere: `python tests/data/trainer_logs/make_corpus.py` (it rewrites the *.log / *.expected.json).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).parent
NAN = float("nan")
CASES = ("healthy", "nan", "scale", "crash")  # and corpus_shapes.SHAPES: "cut", "collapse", "explode"
REAL_LOGS = ("hf_trainer_tqdm_crash", "lightning_real_healthy", "lightning_rich_healthy")  # make_real_logs.py


class Log:
    def __init__(self) -> None:
        self.text: list[str] = []
        self.triples: list[tuple[int, str, float]] = []
        self.crash: str | None = None

    def put(self, text: str, step: int | None = None, pairs: list[tuple[str, str]] | None = None) -> None:
        """Append text; `pairs` are (key, value as printed), recorded at `step`."""
        self.text.append(text)
        for key, printed in pairs or []:
            self.triples.append((step, key, _num(printed)))


def _num(printed: str) -> float:
    text = printed.strip().strip("'\"").replace(",", "").rstrip("%").lower()
    for unit in ("gib", "ms", "m", "g", "s"):
        if text.endswith(unit) and text[: -len(unit)].replace(".", "").isdigit():
            text = text[: -len(unit)]
    return float(text)


def loss_at(i: int, total: int, start: float = 9.0, end: float = 2.0) -> float:
    return end + (start - end) * math.exp(-3.0 * i / total) + 0.01 * math.sin(i)


def fmt(value: float, spec: str) -> str:
    text = format(value, spec)
    return text


TRACEBACK_OOM = [
    "Traceback (most recent call last):",
    '  File "/home/user/project/train.py", line 261, in <module>',
    "    main()",
    '  File "/home/user/project/train.py", line 212, in main',
    "    loss.backward()",
    '  File "/opt/conda/lib/python3.11/site-packages/torch/_tensor.py", line 581, in backward',
    "    torch.autograd.backward(",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB"
    " of which 1.06 GiB is free. Including non-PyTorch memory, this process has 78.08 GiB memory in use.",
]
TRACEBACK_KBD = [
    "Traceback (most recent call last):",
    '  File "train.py", line 330, in <module>',
    "    X, Y = get_batch('train')",
    '  File "train.py", line 118, in get_batch',
    "    x = torch.stack([torch.from_numpy((data[i:i+block_size]).astype(np.int64)) for i in ix])",
    "KeyboardInterrupt",
]
TORCHRUN_TAIL = [
    "E0614 10:22:31.123000 140213 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1)"
    " local_rank: 0 (pid: 4123) of binary: /usr/bin/python",
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
    "============================================================",
    "train.py FAILED",
    "Root Cause (first observed failure):",
    "[0]:",
    "  time      : 2024-06-14_10:22:31",
    "  host      : node042",
    "  rank      : 0 (local_rank: 0)",
    "  exitcode  : 1 (pid: 4123)",
    "============================================================",
    "srun: error: node042: task 0: Exited with exit code 1",
]


def nccl_timeout(rank_prefix: str = "[rank0]:") -> list[str]:
    return [
        f"{rank_prefix}[E614 10:22:31.408271257 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=466119168, NumelOut=466119168, "
        "Timeout(ms)=600000) ran for 600060 milliseconds before timing out.",
        f"{rank_prefix}[E614 10:22:31.465150152 ProcessGroupNCCL.cpp:1664] [PG 1 Rank 0] Exception (either an error "
        "or timeout) detected by watchdog at work: 1580, last enqueued NCCL work: 1582, last completed NCCL work: 1579.",
        "terminate called after throwing an instance of 'c10::DistBackendError'",
    ]


def write(name: str, case: str, log: Log, expect: str) -> None:
    stem = HERE / f"{name}_{case}"
    body = "".join(t if t.endswith(("\n", "\r")) else t + "\n" for t in log.text)
    stem.with_suffix(".log").write_text(body, encoding="utf-8")
    expected = {
        "format": name, "case": case, "decision": expect,
        "crash": log.crash,
        "triples": [[s, k, "nan" if math.isnan(v) else v] for s, k, v in log.triples],
    }
    triples = expected.pop("triples")
    head = json.dumps(expected)[:-1]
    body = ",\n".join(json.dumps(t) for t in triples)
    stem.with_suffix(".expected.json").write_text(f'{head}, "triples": [\n{body}\n]}}\n', encoding="utf-8")


# a run interrupted by a signal from outside (Ctrl-C here) may be requeued or resumed: WAIT, never STOP
INTERRUPTIONS = ("KeyboardInterrupt",)


def expected_decision(case: str, crash: str | None) -> str:
    if case == "crash" and crash in INTERRUPTIONS:
        return "WAIT"
    return {"healthy": "not STOP", "scale": "not STOP", "nan": "STOP", "crash": "STOP", "cut": "not STOP",
            "collapse": "STOP", "explode": "STOP"}[case]


GENERATORS: dict[str, Callable[[str], Log | None]] = {}


def generator(name: str) -> Callable[[Callable[[str], Log | None]], Callable[[str], Log | None]]:
    def register(function: Callable[[str], Log | None]) -> Callable[[str], Log | None]:
        GENERATORS[name] = function
        return function
    return register


def main() -> None:
    import corpus_formats  # noqa: F401  (registers the generators)
    import corpus_formats2  # noqa: F401
    from corpus_shapes import SHAPES

    for old in [*HERE.glob("*_*.log"), *HERE.glob("*.expected.json")]:
        if not old.name.startswith(REAL_LOGS):  # written by real trainers: make_real_logs.py
            old.unlink()
    for name, function in sorted(GENERATORS.items()):
        for case in CASES:
            log = function(case)
            if log is not None:
                write(name, case, log, expected_decision(case, log.crash))
    for (name, case), shape in SHAPES.items():
        log = shape()
        write(name, case, log, expected_decision(case, log.crash))


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(HERE))
    sys.modules.setdefault("make_corpus", sys.modules[__name__])
    main()
