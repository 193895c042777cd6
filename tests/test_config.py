"""Site and user configuration: layering, locked keys, quiet hours, clear errors for bad files."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from guarded_sbatch.core.config import Config, load_config
from guarded_sbatch.core.errors import UsageError
from guarded_sbatch.core.quiet_hours import parse_quiet_hours
from guarded_sbatch.scheduler import resolve_backend

REPO = Path(__file__).resolve().parents[1]
EXAMPLE_SITE = REPO / "site_configs" / "example-site.toml"


def env_for(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {"XDG_CONFIG_HOME": str(tmp_path / "xdg"), "USER": "alice", **extra}


def test_defaults_without_any_file(tmp_path: Path) -> None:
    config = load_config(env=env_for(tmp_path))
    assert config == Config()
    assert config.sources == ()


def test_example_site_config_loads_every_key(tmp_path: Path) -> None:
    config = load_config(env=env_for(tmp_path, GUARDED_SBATCH_SITE_CONFIG=str(EXAMPLE_SITE)))
    assert config.sources == (EXAMPLE_SITE,)
    assert config.mandatory_checks == {"paths", "run-name"}
    assert not config.can_waive("paths") and config.can_waive("eta")
    assert config.run_roots[0] == Path("/scratch/alice/runs")
    assert config.sidecar.partition == "cpu" and config.sidecar.qos == "sidecar"
    assert config.locked == {"checks.mandatory", "name_pattern", "run_roots", "quiet_hours"}
    assert config.sidecar.full_interval_s == 1800


def test_user_config_overrides_unlocked_keys(tmp_path: Path) -> None:
    user = tmp_path / "xdg" / "guarded-sbatch" / "config.toml"
    user.parent.mkdir(parents=True)
    user.write_text('scheduler = "local"\n[sidecar]\nmem = "2G"\n[preflight]\nstat_timeout_seconds = 2\n')
    config = load_config(env=env_for(tmp_path, GUARDED_SBATCH_SITE_CONFIG=str(EXAMPLE_SITE)))
    assert config.scheduler == "local" and resolve_backend(config.scheduler) == "local"
    assert config.sidecar.mem == "2G" and config.sidecar.partition == "cpu"  # deep merge keeps the site's partition
    assert config.stat_timeout_s == 2
    assert config.sources == (EXAMPLE_SITE, user)


@pytest.mark.parametrize(
    ("user_text", "key"),
    [
        ('[checks]\nmandatory = []\n', "checks.mandatory"),
        ('name_pattern = ".*"\n', "name_pattern"),
        ('run_roots = ["/"]\n', "run_roots"),
        ('quiet_hours = []\n', "quiet_hours"),
    ],
)
def test_user_cannot_change_locked_keys(tmp_path: Path, user_text: str, key: str) -> None:
    user = tmp_path / "user.toml"
    user.write_text(user_text)
    with pytest.raises(UsageError, match=f"'{key}' is locked by the site config") as caught:
        load_config(env=env_for(tmp_path, GUARDED_SBATCH_SITE_CONFIG=str(EXAMPLE_SITE), GUARDED_SBATCH_USER_CONFIG=str(user)))
    assert "\n" not in str(caught.value) and str(user) in str(caught.value)


def test_user_may_repeat_a_locked_value_and_may_not_lock(tmp_path: Path) -> None:
    user = tmp_path / "user.toml"
    user.write_text('[checks]\nmandatory = ["paths", "run-name"]\n')
    load_config(site_path=EXAMPLE_SITE, user_path=user, env=env_for(tmp_path))
    user.write_text("locked = []\n")
    with pytest.raises(UsageError, match="'locked' belongs in the site config only"):
        load_config(site_path=EXAMPLE_SITE, user_path=user, env=env_for(tmp_path))


def test_an_unknown_scheduler_is_one_line_when_a_launch_picks_it(tmp_path: Path) -> None:
    site = tmp_path / "site.toml"
    site.write_text('scheduler = "pbs"\n')
    with pytest.raises(UsageError, match="unknown backend 'pbs' \\(the config's `scheduler`\\); .*use slurm or local"):
        resolve_backend(load_config(site_path=site, env=env_for(tmp_path)).scheduler)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('scheduler = "slurm"\nrun_roots = [\n', r"not valid TOML: .*line \d+"),
        ("scheduler = slurm\n", r"not valid TOML: .*line 1"),
        ('shceduler = "slurm"\n', "unknown key 'shceduler'"),
        ('[sidecar]\ncpu = 2\n', "unknown key 'sidecar.cpu'"),
        ('sidecar = "cpu"\n', "'sidecar' must be a table"),
        ("scheduler = 7\n", "'scheduler' must be a string"),
        ('[checks]\nmandatory = ["speling"]\n', "unknown check 'speling'"),
        ('name_pattern = "(unclosed"\n', "not a valid regular expression"),
        ('quiet_hours = ["late"]\n', "quiet_hours entry 'late'"),
        ('quiet_hours = ["Funday 10:00-11:00"]\n', "unknown weekday"),
        ('quiet_hours = ["25:00-07:00"]\n', "impossible time"),
        ("check_interval_minutes = -5\n", "must be a number greater than 0"),
        ("[sidecar]\ncpus = 1.5\n", "must be a whole number"),
        ("[sidecar]\ncpuss = 2\n", "did you mean .?sidecar.cpus"),
        ('locked = ["checks.mandatroy"]\n', "names an unknown key .checks.mandatroy.; did you mean .?checks.mandatory"),
    ],
)
def test_malformed_configs_name_the_file(tmp_path: Path, text: str, message: str) -> None:
    site = tmp_path / "site.toml"
    site.write_text(text)
    with pytest.raises(UsageError, match=message) as caught:
        load_config(site_path=site, env=env_for(tmp_path))
    assert str(site) in str(caught.value) and "\n" not in str(caught.value)


def test_missing_files_named_by_env(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="GUARDED_SBATCH_SITE_CONFIG points to"):
        load_config(env=env_for(tmp_path, GUARDED_SBATCH_SITE_CONFIG=str(tmp_path / "nope.toml")))
    with pytest.raises(UsageError, match="user config .* does not exist"):
        load_config(env=env_for(tmp_path, GUARDED_SBATCH_USER_CONFIG=str(tmp_path / "nope.toml")))


def test_quiet_hours_windows() -> None:
    night = parse_quiet_hours("22:00-07:00")
    monday_late = datetime(2026, 3, 2, 23, 30)  # a Monday
    assert night.contains(monday_late) and night.contains(datetime(2026, 3, 3, 6, 59))
    assert not night.contains(datetime(2026, 3, 3, 7, 0)) and not night.contains(datetime(2026, 3, 3, 12, 0))
    lunch = parse_quiet_hours("Mon-Fri 12:00-13:00")
    assert lunch.contains(datetime(2026, 3, 6, 12, 30)) and not lunch.contains(datetime(2026, 3, 7, 12, 30))
    weekend = parse_quiet_hours("Sat,Sun 00:00-24:00")
    assert weekend.contains(datetime(2026, 3, 8, 23, 59)) and not weekend.contains(datetime(2026, 3, 9, 0, 0))
    friday_night = parse_quiet_hours("Fri 22:00-06:00")  # crosses into Saturday morning
    assert friday_night.contains(datetime(2026, 3, 7, 5, 0)) and not friday_night.contains(datetime(2026, 3, 8, 5, 0))
    config = Config(quiet_hours=(night, lunch))
    assert config.in_quiet_hours(monday_late) is night


def test_the_example_site_config_is_the_schema_written_out(tmp_path: Path) -> None:
    from guarded_sbatch.core.config_example import render_example_site
    from guarded_sbatch.core.config_schema import SCHEMA

    assert EXAMPLE_SITE.read_text(encoding="utf-8") == render_example_site(), (
        "site_configs/example-site.toml differs from the schema: regenerate it with "
        "python -m guarded_sbatch.core.config_example > site_configs/example-site.toml")
    loaded = load_config(site_path=EXAMPLE_SITE, env=env_for(tmp_path))
    assert loaded.sidecar.partition == "cpu"
    documented = [key for key in SCHEMA if key.doc or key.note]
    assert len(documented) >= len(SCHEMA) * 0.6  # most keys say what they do where an admin reads them


@pytest.mark.parametrize(("text", "message"), [
    ("[sidecar]\ncpus = 0\n", "'sidecar.cpus' must be a whole number greater than 0, at most 1024"),
    ("[launcher]\nmax_requeues = -1\n", "'launcher.max_requeues' must be a whole number from 0 to 1e+09"),
    ('[sidecar]\nmode = "per-node"\n', "'sidecar.mode' must be \"per-job\" or \"per-user\""),
    ('[notify]\non = ["stopp"]\n', "names an unknown event 'stopp'"),
    ("enabled = 1\n", "'enabled' must be true or false"),
])
def test_every_bad_value_gets_one_line_with_its_range(tmp_path: Path, text: str, message: str) -> None:
    site = tmp_path / "site.toml"
    site.write_text(text)
    with pytest.raises(UsageError) as caught:
        load_config(site_path=site, env=env_for(tmp_path))
    assert message in str(caught.value) and "\n" not in str(caught.value)
