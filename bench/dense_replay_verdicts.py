"""Dense replay of the corpus: a decide at every Nth logged step on one growing history; prints JSON lines.

    PYTHONPATH=<checkout>/wrapper python bench/dense_replay_verdicts.py <checkout> [every] > verdicts.jsonl

Run it with two checkouts (e.g. main and a branch) and diff the outputs: same verdicts, message and summary
at every replayed step.
"""

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, sys.argv[1] + "/examples/corpus")
import generate as corpus
from guarded_sbatch.judge import MetricHistory, decide
from guarded_sbatch.sources.tensorboard import TensorBoardSource

out = Path(tempfile.mkdtemp())
every = int(sys.argv[2]) if len(sys.argv) > 2 else 1
for name in corpus.CORPUS:
    labels = corpus.generate_run(name, out)
    points = sorted(TensorBoardSource(labels.tensorboard_dir).read_new(), key=lambda p: p.step)
    history = MetricHistory()
    i = 0
    steps = sorted({p.step for p in points})
    rows = []
    for cut in steps[::every] + [steps[-1]]:
        chunk = []
        while i < len(points) and points[i].step <= cut:
            chunk.append(points[i])
            i += 1
        history.add(chunk)
        v = decide(history)
        rows.append(
            [
                cut,
                v.decision.value,
                v.reason.value,
                v.message,
                [repr(a) for a in v.anomalies],
                json.dumps(v.summary, sort_keys=True, default=str),
            ]
        )
    print(json.dumps({"run": name, "rows": rows}), flush=True)
