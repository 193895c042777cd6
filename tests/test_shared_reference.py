"""The reference is the user's: with two real Unix users in a setgid 2775 project under umask 002, the victim's
reference is her own guarded run that finished healthy (its config as launched, kept in her private state folder),
so a co-worker's copy of her new config planted under experiments/ is never even read and cannot turn her block
("global batch ×4 but the learning rate was not rescaled") into a pass; named on purpose with --guard-reference it is
used."""

from __future__ import annotations

from pathlib import Path

import yaml
from e2e_helpers import EXAMPLE
from finished_runs import record_baseline_as
from shared_cluster import SharedCluster, shared_cluster_fixture  # noqa: F401 - the fixture

BLOCK = "global batch 64 -> 256 (×4) but the learning rate was not rescaled"


def _check(cluster: SharedCluster, project: Path, *words: str) -> tuple[int, str]:
    result = cluster.run(cluster.victim, [str(cluster.python), "-P", "-m", "guarded_sbatch", "check", *words],
                         cwd=project, env=cluster.env(cluster.victim, GUARDED_SBATCH_BACKEND="local"))
    return result.returncode, result.stderr


def _config_diff(report: str) -> str:
    """The config-diff lines of a text report (its finding and evidence)."""
    start = report.index("config-diff:")
    return report[start:report.index("\n[", start)]


def test_a_coworkers_copy_of_the_new_config_never_becomes_the_reference(shared_cluster: SharedCluster) -> None:
    cluster = shared_cluster
    project = cluster.copy_project(EXAMPLE, "reference-attack")
    record_baseline_as(cluster, cluster.victim, project)
    code, report = _check(cluster, project, "train.sh", "--batch-size", "256")
    assert code == 3 and BLOCK in _config_diff(report), report
    assert "synthetic-tanh-mlp-baseline/config.yaml" in _config_diff(report)  # the victim's own finished run

    intended = yaml.safe_load((project / "configs" / "synthetic-tanh-mlp.yaml").read_text())
    planted = project / "experiments" / "copy" / "config.yaml"
    cluster.write_as(cluster.coworker, planted, yaml.safe_dump({**intended, "batch_size": 256}))
    code, report = _check(cluster, project, "train.sh", "--batch-size", "256")
    diff = _config_diff(report)
    assert code == 3 and BLOCK in diff, report  # still blocked: the co-worker's file decides nothing
    assert str(planted) not in diff and "experiments/synthetic-tanh-mlp-baseline" in diff

    code, report = _check(cluster, project, f"--guard-reference={planted}", "train.sh", "--batch-size", "256")
    assert BLOCK not in _config_diff(report) and f"reference: {planted} (given)" in _config_diff(report)
