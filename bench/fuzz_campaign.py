"""The long fuzz campaign: mutated inputs for every reader, the judge, the launcher/pre-flight, the
configs, template values and redaction (targets in tests/fuzz_targets.py). Each input runs in a worker
process watched by this one: an input still running after --hang-s seconds is a hang (the worker is
killed and replaced), a worker whose resident memory passes --rss-mb is a blow-up, any exception other
than the target's documented error is an escape. Prints inputs tried and failures per target.

    PYTHONPATH=wrapper:tests python bench/fuzz_campaign.py [--scale 1.0] [--workers 2] [--seed 1]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "wrapper"))

# inputs per target at --scale 1 (about 110 000 in all; the slow targets get fewer)
PLAN = {
    "textlog": 1500, "trainer_state": 15000, "csv": 15000, "mlflow_file": 10000, "mlflow_sqlite": 1500,
    "wandb": 12000, "tensorboard": 12000, "judge": 2000, "launcher_argv": 16000, "launcher_script": 6000,
    "config_toml": 6000, "run_config": 2000, "render": 8000, "redaction": 6000, "full_check": 500,
}


def _rss_mb() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def worker(conn: "mp.connection.Connection", tasks: list[tuple[str, int]], seed: int, limit_mb: int) -> None:
    import warnings

    from fuzz_targets import ALL_SEEDS, TARGETS, Escape, mutate

    warnings.simplefilter("ignore")
    resource.setrlimit(resource.RLIMIT_AS, (limit_mb * 4 * 1024 * 1024, limit_mb * 4 * 1024 * 1024))
    seeds = {name: make() for name, make in ALL_SEEDS.items()}
    with tempfile.TemporaryDirectory(prefix="fuzz-") as folder:
        for name, index in tasks:
            rng = random.Random(f"{seed}:{name}:{index}")
            data = seeds[name] if index == 0 else mutate(rng, seeds[name])
            conn.send(("start", name, index))
            work = Path(folder) / name
            work.mkdir(exist_ok=True)
            error = ""
            try:
                TARGETS[name](data, work)
            except Escape as exc:
                error = str(exc)
            except MemoryError:
                error = "MemoryError (address-space limit reached)"
            conn.send(("done", name, index, error, _rss_mb(), data[:300].hex() if error else ""))
    conn.send(("exit",))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--hang-s", type=float, default=5.0)
    parser.add_argument("--rss-mb", type=int, default=500)
    parser.add_argument("--only", default="")
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    plan = {k: max(1, int(v * args.scale)) for k, v in PLAN.items() if not args.only or k in args.only.split(",")}
    tasks = [(name, i) for name, count in plan.items() for i in range(count)]
    random.Random(args.seed).shuffle(tasks)
    shares = [tasks[w :: args.workers] for w in range(args.workers)]
    stats = {name: {"tried": 0, "escapes": 0, "hangs": 0, "rss_over": 0, "max_s": 0.0, "max_rss_mb": 0.0}
             for name in plan}
    failures: list[dict[str, object]] = []
    started = time.monotonic()
    context = mp.get_context("fork")
    running = []
    for share in shares:
        running.append(_start(context, share, args))
    while running:
        for slot in list(running):
            conn, proc, share, state = slot
            if conn.poll(0.05):
                message = conn.recv()
                if message[0] == "start":
                    state["current"], state["since"] = message[1:], time.monotonic()
                elif message[0] == "done":
                    _, name, index, error, rss, sample = message
                    took = time.monotonic() - state["since"]
                    state["current"] = None
                    state["done"] += 1
                    entry = stats[name]
                    entry["tried"] += 1
                    entry["max_s"] = max(entry["max_s"], took)
                    entry["max_rss_mb"] = max(entry["max_rss_mb"], rss)
                    if error:
                        entry["escapes"] += 1
                        failures.append({"target": name, "index": index, "kind": "escape", "error": error[:300],
                                         "input_hex": sample})
                    if rss > args.rss_mb:
                        entry["rss_over"] += 1
                        failures.append({"target": name, "index": index, "kind": "rss", "rss_mb": rss})
                    if took > args.hang_s:
                        entry["hangs"] += 1
                        failures.append({"target": name, "index": index, "kind": "slow", "seconds": round(took, 2)})
                elif message[0] == "exit":
                    proc.join()
                    running.remove(slot)
            elif state.get("current") and time.monotonic() - state["since"] > args.hang_s:
                name, index = state["current"]
                stats[name]["tried"] += 1
                stats[name]["hangs"] += 1
                failures.append({"target": name, "index": index, "kind": "hang", "seconds": args.hang_s})
                proc.kill()
                proc.join()
                running.remove(slot)
                rest = share[state["done"] + 1 :]
                if rest:
                    running.append(_start(context, rest, args))
            elif not proc.is_alive() and not conn.poll(0):
                running.remove(slot)  # died (e.g. killed for memory): count its current input
                if state.get("current"):
                    name, index = state["current"]
                    stats[name]["tried"] += 1
                    stats[name]["rss_over"] += 1
                    failures.append({"target": name, "index": index, "kind": "worker died", "code": proc.exitcode})
                rest = share[state["done"] + 1 :]
                if rest:
                    running.append(_start(context, rest, args))
    elapsed = time.monotonic() - started
    total = {key: sum(s[key] for s in stats.values()) for key in ("tried", "escapes", "hangs", "rss_over")}
    print(f"{'target':16} {'tried':>7} {'escapes':>8} {'hangs>' + str(int(args.hang_s)) + 's':>9} "
          f"{'rss>' + str(args.rss_mb) + 'MB':>10} {'max s':>7} {'max RSS MB':>10}")
    for name, entry in stats.items():
        print(f"{name:16} {entry['tried']:7d} {entry['escapes']:8d} {entry['hangs']:9d} {entry['rss_over']:10d} "
              f"{entry['max_s']:7.2f} {entry['max_rss_mb']:10.1f}")
    print(f"{'TOTAL':16} {total['tried']:7d} {total['escapes']:8d} {total['hangs']:9d} {total['rss_over']:10d}"
          f"   ({elapsed:.0f} s, {args.workers} workers)")
    for failure in failures[:30]:
        print("FAILURE", json.dumps(failure)[:400])
    if args.json:
        Path(args.json).write_text(json.dumps({"stats": stats, "total": total, "failures": failures,
                                               "elapsed_s": elapsed}, indent=1))
    return 1 if total["escapes"] or total["hangs"] or total["rss_over"] else 0


def _start(context, share, args):  # type: ignore[no-untyped-def]
    parent, child = context.Pipe()
    proc = context.Process(target=worker, args=(child, share, args.seed, args.rss_mb), daemon=True)
    proc.start()
    child.close()
    return (parent, proc, share, {"current": None, "since": time.monotonic(), "done": 0})


if __name__ == "__main__":
    sys.exit(main())
