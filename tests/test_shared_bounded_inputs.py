"""Inputs bounded before parsing, and files a co-worker swaps named instead of silently read or skipped: a YAML
alias bomb planted as a reference config, a TOML config too large, a one-shot read that judges the whole run, a
metric file swapped for /dev/zero or /proc/self/mem (a named WAIT, not CONTINUE on the old points), 20 000
files hiding the event files, and an evidence snippet whose log was swapped for a link into private files."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from e2e_helpers import EXAMPLE
from shared_cluster import SharedCluster, shared_cluster_fixture  # noqa: F401 - the fixture
from source_writers import tb_event, write_tb_events
from guarded_sbatch.judge.policy import RunContext
from guarded_sbatch.judge.verdict import Decision
from guarded_sbatch.sidecar.one_shot import judge_sources
from guarded_sbatch.sources.run_sources import specs_from_flags
from guarded_sbatch.sidecar.plan import WatchPlan
from guarded_sbatch.sidecar.source_set import SourceSet

BOMB = "model: tanh-mlp\ntask: synthetic-regression\na: &a {x: 1, y: 2, z: 3, w: 4, v: 5, u: 6, t: 7, s: 8, r: 9}\n" + "".join(
    f"{level}: &{level} {{" + ", ".join(f"{prev}{i}: *{prev}" for i in range(1, 10)) + "}\n"
    for prev, level in zip("abcdefgh", "bcdefghi"))


def _monitor(*args: str, env: dict[str, str] | None = None) -> dict:
    result = subprocess.run([sys.executable, "-P", "-m", "guarded_sbatch", "monitor", "--once", "--json", *args],
                            capture_output=True, text=True, timeout=300, cwd="/", env=env)
    return json.loads(result.stdout)


def test_an_alias_bomb_planted_as_a_reference_config_is_not_expanded(shared_cluster: SharedCluster) -> None:
    cluster = shared_cluster
    project = cluster.copy_project(EXAMPLE, "bomb")
    cluster.write_as(cluster.coworker, project / "configs" / "synthetic-tanh-mlp-ref.yaml", BOMB)
    limit = 1536 * 1024 * 1024  # far below what expanding the bomb takes (5 GB measured)
    env = cluster.env(cluster.victim, GUARDED_SBATCH_BACKEND="local", OPENBLAS_NUM_THREADS="1")
    check = subprocess.run(
        ["setpriv", f"--reuid={cluster.victim.uid}", f"--regid={cluster.victim.gid}", "--init-groups", "--",
         str(cluster.python), "-P", "-m", "guarded_sbatch", "check", "train.sh"],
        cwd=project, env=env, capture_output=True, text=True, timeout=120,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)))
    assert check.returncode in (0, 3), check.stderr
    assert "Traceback" not in check.stderr and "MemoryError" not in check.stderr
    # a config planted beside hers is no run of hers: never read as a reference (she has none yet)
    assert "synthetic-tanh-mlp-ref.yaml" not in check.stderr and "no reference run yet" in check.stderr
    # the same bomb as the run's own config: the pre-flight blocks, naming it
    script = project / "train.sh"
    script.write_text(script.read_text().replace("configs/synthetic-tanh-mlp.yaml", "configs/synthetic-tanh-mlp-ref.yaml"))
    own = cluster.run(cluster.victim, [str(cluster.python), "-P", "-m", "guarded_sbatch", "check", "train.sh"], cwd=project,
                      env=env)
    assert own.returncode == 3 and "alias bomb" in own.stderr and "Traceback" not in own.stderr, own.stderr


def test_a_toml_config_too_large_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    config = tmp_path / "site.toml"
    config.write_text("[enforcement]\n" + "".join(f"k{i} = {i}\n" for i in range(200_000)))
    env = {**os.environ, "GUARDED_SBATCH_STATE_DIR": str(tmp_path / "st")}
    result = subprocess.run([sys.executable, "-P", "-m", "guarded_sbatch", "admin", "render-policy", str(config)],
                            capture_output=True, text=True, timeout=60, cwd="/", env=env)
    assert result.returncode == 2 and "more than the 1048576 a config may be" in result.stderr
    assert result.stderr.count("\n") == 1


def test_a_one_shot_read_judges_the_whole_run_not_its_first_16_mb(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    with open(log, "w") as handle:
        step = 0
        note = "x" * 900  # long lines: 20 MB in about 22 k lines (the reader's cost is per line; the bound is bytes)
        while handle.tell() < 20 * 1024 * 1024:
            step += 1
            handle.write(f"{{'loss': {2.0 / step + 0.1:.6f}, 'grad_norm': 1.0, 'learning_rate': 0.001, 'step': {step}, "
                         f"'note': '{note}'}}\n")
        for later in range(step + 1, step + 200):
            handle.write(f"{{'loss': nan, 'grad_norm': nan, 'learning_rate': 0.001, 'step': {later}}}\n")
    answer = _monitor("--log", str(log), env={**os.environ, "GUARDED_SBATCH_STATE_DIR": str(tmp_path / "st")})
    assert answer["decision"] == "STOP" and answer["reason"] == "non_finite_loss", answer
    assert answer["last_step"] == step + 199


def test_an_event_file_swapped_for_dev_zero_or_proc_mem_is_a_named_wait(tmp_path: Path) -> None:
    tb = tmp_path / "tb"
    event_file = write_tb_events(tb, [tb_event(s, "train/loss", 2.0 / s + 0.1, wall_time=time.time()) for s in range(1, 300)])
    settings = WatchPlan(run_name="r", job_id=None, state_file=tmp_path / "s.json", evidence_dir=tmp_path / "e",
                               sources=specs_from_flags({"tensorboard": [tb]}))
    sources = SourceSet(settings, None, live=True)
    sources.read()
    assert judge_sources(sources, None, RunContext(job_live=True)).decision is Decision.CONTINUE
    for target in ("/dev/zero", "/proc/self/mem"):
        event_file.unlink()
        event_file.symlink_to(target)
        sources.read()
        verdict = judge_sources(sources, None, RunContext(job_live=True))
        assert verdict.decision is Decision.WAIT and str(event_file) in verdict.message, verdict.message
        assert ("a device" if target == "/dev/zero" else "a file of /proc or /sys") in verdict.message


def test_twenty_thousand_files_say_why_the_event_files_were_not_found(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    for index in range(20_001):
        (run / f"sample-{index:05d}.png").touch()
    write_tb_events(run / "z-logs", [tb_event(s, "train/loss", 1.0) for s in range(1, 10)])
    answer = _monitor("--tb", str(run), env={**os.environ, "GUARDED_SBATCH_STATE_DIR": str(tmp_path / "st")})
    assert answer["decision"] == "WAIT" and "more than 20000 entries" in answer["message"], answer


def test_the_evidence_snippet_never_follows_a_log_swapped_for_a_link(shared_cluster: SharedCluster) -> None:
    cluster = shared_cluster
    secret = cluster.victim.home / "private-notes.txt"
    cluster.write_as(cluster.victim, secret, "the victim's private key material\n", mode="600")
    log = cluster.project / "slurm-4242.out"
    cluster.write_as(cluster.victim, log, "step 1 loss nan\n")
    code = "import sys\nfrom pathlib import Path\nfrom guarded_sbatch.actions.evidence import tail_snippet\n" \
           "print(repr(tail_snippet(Path(sys.argv[1]))))\n"
    own = cluster.run(cluster.victim, [str(cluster.python), "-P", "-c", code, str(log)], cwd=cluster.victim.home)
    assert "loss nan" in own.stdout, own.stderr
    assert cluster.run(cluster.coworker, ["sh", "-c", f"rm -f {log} && ln -s {secret} {log}"]).returncode == 0
    swapped = cluster.run(cluster.victim, [str(cluster.python), "-P", "-c", code, str(log)], cwd=cluster.victim.home)
    assert swapped.returncode == 0 and swapped.stdout.strip() == "''", swapped.stdout
    cluster.write_as(cluster.coworker, cluster.project / "slurm-4243.out", "planted text\n")  # not the victim's file
    planted = cluster.run(cluster.victim, [str(cluster.python), "-P", "-c", code, str(cluster.project / "slurm-4243.out")],
                          cwd=cluster.victim.home)
    assert planted.stdout.strip() == "''"
