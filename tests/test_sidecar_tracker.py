"""The sidecar notes the W&B run behind the metrics in the run's record, so kill/restart can delete it."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

from guarded_sbatch.sidecar.loop import Sidecar
from guarded_sbatch.sources.run_sources import specs_from_flags
from guarded_sbatch.sidecar.plan import WatchPlan
from source_writers import write_wandb_offline_run


def test_wandb_run_is_recorded_for_the_cleanup(tmp_path: Path) -> None:
    wandb_dir = write_wandb_offline_run(tmp_path / "work")  # a real offline run, in its own process
    run_id = next(wandb_dir.glob("offline-run-*/run-*.wandb")).stem.removeprefix("run-")
    run_dir = tmp_path / "state" / "runs" / "tanh-mlp-bs64-7"
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({"run_id": "tanh-mlp-bs64-7", "run_name": "tanh-mlp-bs64",
                                                  "backend": "local", "job_id": "7"}))
    settings = WatchPlan(run_name="tanh-mlp-bs64", job_id=None, state_file=run_dir / "sidecar-state.json",
                               evidence_dir=run_dir / "evidence", sources=specs_from_flags({"wandb": [wandb_dir]}))
    out = io.StringIO()
    Sidecar(settings, None, out).poll_once()
    tracker = json.loads((run_dir / "run.json").read_text())["tracker"]
    assert tracker["kind"] == "wandb" and tracker["run_path"].endswith(f"sources-test/{run_id}")
    assert Path(tracker["run_dir"]).is_dir() and not os.path.islink(tracker["run_dir"])
    assert any(p.name == f"run-{run_id}.wandb" for p in Path(tracker["run_dir"]).iterdir())
    assert "Data source: wandb_ok" in out.getvalue()
