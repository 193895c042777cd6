"""`[judge]` in the site/user config sets the judge's thresholds: every name documented, bad values refused in one
line with the valid range, the launch's table recorded with the run and used by its sidecar over the config."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from guarded_sbatch.core.config import load_config
from guarded_sbatch.core.errors import UsageError
from guarded_sbatch.records.registry import RunRecord
from guarded_sbatch.judge import Decision, JudgePolicy, MetricHistory, decide
from guarded_sbatch.judge.table import policy_from_table, policy_table
from guarded_sbatch.sources.points import MetricPoint

DOCS = Path(__file__).resolve().parents[1] / "docs" / "judge.md"


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_every_threshold_is_documented_with_its_default() -> None:
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| `(\w+)` \| `([^`]*)` \|", DOCS.read_text(), re.M)}
    assert set(rows) == {field.name for field in dataclasses.fields(JudgePolicy)}
    for field in dataclasses.fields(JudgePolicy):
        assert rows[field.name] == repr(field.default), field.name


def test_a_judge_table_sets_the_thresholds_and_the_judge_uses_them(tmp_path: Path) -> None:
    user = _config(tmp_path, "[judge]\nnonfinite_loss_points = 3\nkey_metric = \"eval/acc\"\n"
                             "key_metric_direction = \"max\"\nspike_z = 7.5\n")
    config = load_config(user_path=user, env={})
    policy = policy_from_table(config.judge)
    assert (policy.nonfinite_loss_points, policy.key_metric, policy.spike_z) == (3, "eval/acc", 7.5)
    assert policy.key_metric_direction == "max"
    assert policy_from_table(policy_table(policy)) == policy  # what a run records reads back the same
    points = [MetricPoint(10 * i, 0.0, "loss", 1.0 / i) for i in range(1, 20)]
    points += [MetricPoint(200, 0.0, "loss", float("nan")), MetricPoint(210, 0.0, "loss", float("nan"))]
    history = MetricHistory.from_points(points)
    assert decide(history).decision is Decision.STOP  # the default: the second logged NaN
    assert decide(history, policy).decision is Decision.WAIT  # this config asks for a third


@pytest.mark.parametrize(("line", "expected"), [
    ("spike_z = -1", r"\[judge\] spike_z = -1 is not valid: give a number above 0, at most 1e\+09 \(default 6.0\)"),
    ("min_loss_points = 2.5", r"min_loss_points = 2.5 is not valid: give a whole number from 1 .* \(default 5\)"),
    ("loss_scale_min_skip_rate = 1.5", r"give a number in \(0, 1\]"),
    ("spike_min_ratio = 0.5", r"give a number from 1 to"),
    ("key_metric_direction = \"up\"", r"give \"min\" or \"max\""),
    ("spike_zz = 6", r"no threshold named 'spike_zz'; did you mean spike_z\?"),
    ("spike_z = \"high\"", r"give a number above 0"),
])
def test_a_bad_threshold_is_one_line_with_the_valid_range(tmp_path: Path, line: str, expected: str) -> None:
    user = _config(tmp_path, f"[judge]\n{line}\n")
    with pytest.raises(UsageError) as raised:
        policy_from_table(load_config(user_path=user, env={}).judge, where=str(user))
    assert re.search(expected, raised.value.message), raised.value.message
    assert "\n" not in raised.value.message
    log = tmp_path / "train.log"
    log.write_text("step 1 loss 2.0 lr 1e-03\n")
    env = {**os.environ, "GUARDED_SBATCH_USER_CONFIG": str(user), "GUARDED_SBATCH_STATE_DIR": str(tmp_path / "st")}
    env.pop("GUARDED_SBATCH_SITE_CONFIG", None)
    result = subprocess.run([sys.executable, "-m", "guarded_sbatch", "monitor", "--once", "--log", str(log)],
                            capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and re.search(expected, result.stderr), result.stderr


def test_a_table_that_is_not_numbers_or_strings_is_refused_by_the_config(tmp_path: Path) -> None:
    user = _config(tmp_path, "[judge]\nspike_z = [1, 2]\n")
    with pytest.raises(UsageError, match=r"'judge.spike_z' must be a number .* not a list; see docs/judge.md"):
        load_config(user_path=user, env={})


def test_the_site_can_lock_a_threshold(tmp_path: Path) -> None:
    site = tmp_path / "site.toml"
    site.write_text("locked = [\"judge.spike_z\"]\n[judge]\nspike_z = 8.0\n", encoding="utf-8")
    user = _config(tmp_path, "[judge]\nspike_z = 3.0\n")
    with pytest.raises(UsageError, match="'judge.spike_z' is locked by the site config"):
        load_config(site_path=site, user_path=user, env={})


def test_a_sidecar_judges_with_its_runs_record_not_the_config_of_today(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from guarded_sbatch.sidecar.plan import plan_of

    monkeypatch.setenv("GUARDED_SBATCH_USER_CONFIG", str(_config(tmp_path, "[judge]\nspike_z = 9.0\n")))
    monkeypatch.delenv("GUARDED_SBATCH_SITE_CONFIG", raising=False)
    record = RunRecord(run_id="r1", run_name="mnist-mlp-bs64-lr1e-3", backend="local", job_id="7",
                       judge={"spike_z": 7.0, "nonfinite_loss_points": 3, "train_loss_key": "train/loss"})
    policy = plan_of(record, tmp_path, site=load_config()).policy
    assert policy is not None
    assert (policy.spike_z, policy.nonfinite_loss_points, policy.train_loss_key) == (7.0, 3, "train/loss")
    broken = dataclasses.replace(record, judge={"spike_z": -1})
    assert plan_of(broken, tmp_path).policy == JudgePolicy()  # never unguarded


def test_every_watcher_judges_a_run_with_its_records_thresholds() -> None:
    """The sidecar's fallback, the shared monitor and `show` take a run's policy from its record through one function."""
    import inspect

    from guarded_sbatch.cli import monitor, show, sidecar_job
    from guarded_sbatch.judge.table import recorded_policy
    from guarded_sbatch.sidecar import plan, shared_monitor

    assert recorded_policy({"spike_z": 7.0}, "r1").spike_z == 7.0
    assert recorded_policy({"spike_z": -7}, "r1") == JudgePolicy()  # edited by hand: defaults, still watched
    assert recorded_policy({}, "r1") == JudgePolicy()
    assert "recorded_policy(record.judge, record.run_name)" in inspect.getsource(plan)
    for module in (show, shared_monitor, sidecar_job, monitor):  # every watcher's plan comes from that one builder
        assert "plan_of(" in inspect.getsource(module)
