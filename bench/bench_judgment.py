"""Benchmark: the judge beside two anchors on the labelled corpus, every run judged at every logged step.

    .venv/bin/python bench/bench_judgment.py [--only NAME ...] [--per-run] [--seeds 0 1 2]

Generates the corpus (examples/corpus/generate.py) in a temporary folder, reads each run back from its
TensorBoard files with the project's reader, and replays it poll by poll (a poll after every logged
step) through three judges:
  - guarded-sbatch: `decide`, as the sidecar calls it;
  - stop-on-first-NaN: STOP at the first non-finite value of any logged metric (the usual
    `if not math.isfinite(loss): raise` guard);
  - Lightning EarlyStopping defaults: monitor the eval loss, mode min, min_delta 0, patience 3 checks
    (evaluations), check_finite on; STOP when 3 evaluations in a row do not beat the best one or the
    monitored value is non-finite. A run without evaluations is never stopped by it.
Prints a markdown table, then beside the anchors the steps from the break to STOP for each kind of break, then
the text-log corpus (tests/data/trainer_logs: the formats' NaN, crash and loss-scale endings, the cut, collapse and
explosion shapes, the real HF Trainer crash) replayed poll by poll: at which logged loss point after the first NaN
each judge stops (1 = the first NaN, 2 = the second) and how many steps after the break (and, with --per-run, each
run's first STOP per judge); asserts nothing. The anchors on text logs: stop-on-first-NaN (also Keras'
TerminateOnNaN and Lightning's check_finite on the training loss) and the same with a crash line counted as a stop.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "wrapper"))
sys.path.insert(0, str(REPO / "examples" / "corpus"))
sys.path.insert(0, str(REPO / "tests"))

import generate as corpus  # noqa: E402 - after the sys.path lines above
from dense_replay import dense_replay  # noqa: E402 - after the sys.path lines above
from guarded_sbatch.sources.points import CrashState, MetricPoint  # noqa: E402 - after the sys.path lines above
from guarded_sbatch.sources.tensorboard import TensorBoardSource  # noqa: E402 - after the sys.path lines above

EVAL_KEY = "eval/loss"


class Outcome:
    def __init__(
        self, stop: int | None, reason: str = "", wait_before_stop: bool = False, polls: int = 0, waits: int = 0
    ) -> None:
        self.stop, self.reason, self.wait_before_stop = stop, reason, wait_before_stop
        self.polls, self.waits = polls, waits  # polls made, and how many said WAIT (not "too early")


def judge_guarded(points: list[MetricPoint], labels: corpus.RunLabels) -> Outcome:
    replay = dense_replay(points)
    wait = replay.first_wait_from(labels.onset_step or 0)
    reason = replay.stop_verdict.reason.value if replay.stop_verdict else ""
    waits = sum(1 for _, r in replay.waits if r != "too_early")
    return Outcome(
        replay.first_stop,
        reason,
        wait is not None and (replay.first_stop is None or wait < replay.first_stop),
        replay.polls,
        waits,
    )


def judge_first_nan(points: list[MetricPoint], labels: corpus.RunLabels) -> Outcome:
    bad = [p.step for p in points if not math.isfinite(p.value)]
    return Outcome(min(bad) if bad else None, "non-finite value")


def judge_lightning_early_stopping(points: list[MetricPoint], labels: corpus.RunLabels, patience: int = 3) -> Outcome:
    evals = sorted((p.step, p.value) for p in points if p.key == EVAL_KEY)
    best, wait = math.inf, 0
    for step, value in evals:
        if not math.isfinite(value):
            return Outcome(step, "monitored value non-finite")
        if value < best:
            best, wait = value, 0
        else:
            wait += 1
            if wait >= patience:
                return Outcome(step, f"no improvement in {patience} evaluations")
    return Outcome(None)


JUDGES: dict[str, Callable[[list[MetricPoint], corpus.RunLabels], Outcome]] = {
    "guarded-sbatch": judge_guarded,
    "stop-on-first-NaN": judge_first_nan,
    "Lightning EarlyStopping (defaults)": judge_lightning_early_stopping,
}


def score(outcomes: dict[str, Outcome], labels: dict[str, corpus.RunLabels]) -> dict[str, object]:
    healthy = [n for n, lab in labels.items() if lab.healthy]
    broken = [n for n, lab in labels.items() if not lab.healthy]
    should = [n for n in broken if labels[n].should_wait_first]
    false_stops = [n for n in healthy if outcomes[n].stop is not None]
    early = [n for n in broken if outcomes[n].stop is not None and outcomes[n].stop < (labels[n].onset_step or 0)]
    caught, delays = [], []
    for n in broken:
        lab, stop = labels[n], outcomes[n].stop
        if (
            stop is not None
            and lab.onset_step is not None
            and lab.onset_step <= stop <= lab.onset_step + (lab.stop_within_steps or 0)
        ):
            caught.append(n)
            delays.append(stop - lab.onset_step)
    waited = [n for n in should if outcomes[n].wait_before_stop and n in caught]
    healthy_polls = sum(outcomes[n].polls for n in healthy)
    healthy_waits = sum(outcomes[n].waits for n in healthy)
    return {
        "false_stop_healthy": f"{len(false_stops)}/{len(healthy)}",
        "stop_before_onset": f"{len(early)}/{len(broken)}",
        "caught_in_bound": f"{len(caught)}/{len(broken)}",
        "median_delay": f"{statistics.median(delays):.0f}" if delays else "-",
        "wait_before_stop": f"{len(waited)}/{len(should)}",
        "healthy_wait": f"{100 * healthy_waits / healthy_polls:.1f} %" if healthy_polls else "-",
        "false_names": ", ".join(false_stops + early) or "-",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--per-run", action="store_true")
    parser.add_argument("--seeds", nargs="*", type=int, default=[0], help="train the corpus with these seeds")
    args = parser.parse_args(argv)
    names = args.only or list(corpus.CORPUS)
    for seed in args.seeds:
        if len(args.seeds) > 1:
            print(f"\n## seed {seed}\n")
        bench_seed(names, seed, args.per_run)
    bench_text_logs(args.per_run)
    return 0


def bench_seed(names: list[str], seed: int, per_run: bool) -> None:
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-judgment-") as tmp:
        labels = {n: corpus.generate_run(n, tmp, seed) for n in names}
        points = {n: TensorBoardSource(labels[n].tensorboard_dir).read_new() for n in names}
    generated = time.perf_counter() - started
    outcomes: dict[str, dict[str, Outcome]] = {}
    seconds: dict[str, float] = {}
    for judge, fn in JUDGES.items():
        t0 = time.process_time()
        outcomes[judge] = {n: fn(points[n], labels[n]) for n in names}
        seconds[judge] = time.process_time() - t0
    polls = sum(len({p.step for p in points[n]}) for n in names)
    print(
        f"corpus: {len(names)} runs ({sum(lab.healthy for lab in labels.values())} healthy), {polls} polls "
        f"(one per logged step), generated in {generated:.1f} s\n"
    )
    print(
        "| judge | healthy runs with a STOP | broken runs stopped before the break | broken runs stopped "
        "within the bound | median steps after the break | `should` cases with WAIT before STOP | "
        "healthy polls that say WAIT |"
    )
    print("|---|---|---|---|---|---|---|")
    for judge in JUDGES:
        s = score(outcomes[judge], labels)
        print(
            f"| {judge} | {s['false_stop_healthy']} | {s['stop_before_onset']} | {s['caught_in_bound']} | "
            f"{s['median_delay']} | {s['wait_before_stop']} | {s['healthy_wait']} |"
        )
    print()
    for judge in JUDGES:
        s = score(outcomes[judge], labels)
        print(
            f"{judge}: {seconds[judge]:.1f} s CPU for {polls} polls "
            f"({1000 * seconds[judge] / polls:.2f} ms per poll); false STOPs: {s['false_names']}"
        )
    print("\n| kind of break (run) | break at step | " + " | ".join(f"{j}: steps to STOP" for j in JUDGES) + " |")
    print("|---|---|" + "---|" * len(JUDGES))
    for n in names:
        lab = labels[n]
        if lab.healthy:
            continue
        cells = []
        for judge in JUDGES:
            stop = outcomes[judge][n].stop
            cells.append("-" if stop is None else f"{stop - (lab.onset_step or 0)}")
        kind = "/".join(lab.reasons[:2]) + ("/…" if len(lab.reasons) > 2 else "")
        print(f"| {kind} ({n}) | {lab.onset_step} | " + " | ".join(cells) + " |")
    if per_run:
        print("\n| run | healthy | onset | bound | " + " | ".join(JUDGES) + " |")
        print("|---|---|---|---|" + "---|" * len(JUDGES))
        for n in names:
            lab = labels[n]
            cells = []
            for judge in JUDGES:
                o = outcomes[judge][n]
                cells.append("-" if o.stop is None else f"STOP@{o.stop} {o.reason}")
            print(f"| {n} | {lab.healthy} | {lab.onset_step} | {lab.stop_within_steps} | " + " | ".join(cells) + " |")


TEXT_CASES = ("nan", "explode", "collapse", "crash", "scale", "cut")


def bench_text_logs(per_run: bool) -> None:
    """The text-log corpus replayed poll by poll through the real reader's points: where each judge stops."""
    from textlog_corpus import CORPUS, corpus_logs, expected_of, read_with_crashes

    rows: dict[str, list[tuple[str, int | None, int | None, int | None, str]]] = {}
    for log in corpus_logs():
        expected = expected_of(log)
        if expected["case"] not in TEXT_CASES:
            continue
        metrics, crashes = read_with_crashes(log)
        replay = dense_replay(metrics, crashes)
        loss_key = replay.last.summary.get("keys", {}).get("train_loss") if replay.last else None
        losses = sorted((p.step, p.value) for p in metrics if p.key == loss_key)
        first_nan = next((step for step, value in losses if not math.isfinite(value)), None)
        scale = sorted((p.step, p.value) for p in metrics if p.key == "loss_scale")
        first_drop = next((b[0] for a, b in zip(scale, scale[1:]) if b[1] < a[1]), None)
        crash_at = max((e.step for e in crashes if e.state is CrashState.CONFIRMED), default=None)
        broke = first_nan if first_nan is not None else first_drop if expected["case"] in ("collapse", "scale") \
            else crash_at
        nth = None
        if first_nan is not None and replay.first_stop is not None:
            nth = sum(1 for step, _ in losses if first_nan <= step <= replay.first_stop)
        first_any_nan = min((p.step for p in metrics if not math.isfinite(p.value)), default=None)
        anchor_crash = min(x for x in (first_any_nan, crash_at, 10**18) if x is not None)
        reason = replay.stop_verdict.reason.value if replay.stop_verdict else (replay.last.reason.value
                                                                             if replay.last else "")
        rows.setdefault(expected["case"], []).append(
            (log.stem, broke, replay.first_stop, None if anchor_crash == 10**18 else anchor_crash, f"{reason}"))
        if nth is not None:
            rows.setdefault("nan_points", []).append((log.stem, nth, None, None, ""))
    print(f"\ntext-log corpus ({CORPUS.relative_to(REPO)}): each log replayed poll by poll (one poll per logged step)\n")
    print("| case | logs | guarded-sbatch: STOPs | median steps from the break to STOP | stop-on-first-NaN-or-crash: "
          "STOPs | its median steps | guarded-sbatch reasons |")
    print("|---|---|---|---|---|---|---|")
    for case in TEXT_CASES:
        got = rows.get(case, [])
        if not got:
            continue
        ours = [stop - broke for _, broke, stop, _, _ in got if stop is not None and broke is not None]
        theirs = [a - broke for _, broke, _, a, _ in got if a is not None and broke is not None]
        reasons = sorted({r for *_, r in got})
        print(f"| {case} | {len(got)} | {sum(1 for g in got if g[2] is not None)} | "
              f"{statistics.median(ours) if ours else '-'} | {sum(1 for g in got if g[3] is not None)} | "
              f"{statistics.median(theirs) if theirs else '-'} | {', '.join(reasons)} |")
    nth = [n for _, n, *_ in rows.get("nan_points", [])]
    if nth:
        counts = {k: nth.count(k) for k in sorted(set(nth))}
        print("\nNaN in the training loss: guarded-sbatch STOPs at logged loss point "
              + ", ".join(f"#{k} after the first NaN in {v} log(s)" for k, v in counts.items())
              + f" (of {len(nth)}); stop-on-first-NaN and TerminateOnNaN: #1 in all")
    if per_run:
        print("\n| log | break at | guarded-sbatch STOP | first NaN or crash | reason |\n|---|---|---|---|---|")
        for case in TEXT_CASES:
            for name, broke, stop, anchor, reason in rows.get(case, []):
                print(f"| {name} | {broke} | {stop} | {anchor} | {reason} |")


if __name__ == "__main__":
    sys.exit(main())
