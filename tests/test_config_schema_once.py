"""Every configuration key is declared once, in core/config_schema.py: one Key more (and the settings field that
holds it) is known, checked, loaded, refused in a user config when site-only, and documented in the example site
config written from the schema; [enforcement] is read through the same declarations."""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

import pytest

from guarded_sbatch.core import config, config_schema
from guarded_sbatch.core.config_example import render_example_site
from guarded_sbatch.core.config_key import Key
from guarded_sbatch.core.errors import UsageError

WIDGETS = Key("probe.widgets", "int", 4, "Widgets each probe may use.", high=64, example=8)
SECRET = Key("probe.site_secret", "str", "", "", site_only=True)


@pytest.fixture
def one_more_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(config_schema, "SCHEMA", (*config_schema.SCHEMA, WIDGETS, SECRET))
    monkeypatch.setattr(config_schema, "KEYS", {**config_schema.KEYS, WIDGETS.path: WIDGETS, SECRET.path: SECRET})
    wider = dataclasses.make_dataclass("Config", [("probe_widgets", int, config.setting(WIDGETS.path))],
                                       bases=(config.Config,), frozen=True)
    monkeypatch.setattr(config, "Config", wider)


def _load(tmp_path: Path, site: str = "", user: str = "") -> config.Config:
    (tmp_path / "site.toml").write_text(site)
    (tmp_path / "user.toml").write_text(user)
    return config.load_config(site_path=tmp_path / "site.toml", user_path=tmp_path / "user.toml", env={})


@pytest.mark.usefixtures("one_more_key")
def test_a_new_key_is_loaded_with_its_default_and_its_value(tmp_path: Path) -> None:
    assert getattr(_load(tmp_path), "probe_widgets") == 4
    assert getattr(_load(tmp_path, site="[probe]\nwidgets = 12\n"), "probe_widgets") == 12
    assert getattr(_load(tmp_path, user="[probe]\nwidgets = 2\n"), "probe_widgets") == 2


@pytest.mark.usefixtures("one_more_key")
def test_a_new_key_is_checked_as_declared(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="'probe.widgets' must be a whole number greater than 0, at most 64"):
        _load(tmp_path, site="[probe]\nwidgets = 65\n")
    with pytest.raises(UsageError, match="unknown key 'probe.widget'; did you mean .?probe.widgets"):
        _load(tmp_path, site="[probe]\nwidget = 3\n")
    with pytest.raises(UsageError, match="'probe.site_secret' belongs in the site config only"):
        _load(tmp_path, site='[probe]\nsite_secret = "s"\n', user='[probe]\nsite_secret = "s"\n')


@pytest.mark.usefixtures("one_more_key")
def test_a_new_key_is_documented_in_the_example_site_config(tmp_path: Path) -> None:
    text = render_example_site()
    assert "[probe]\n# Widgets each probe may use.\nwidgets = 8\n" in text
    assert tomllib.loads(text)["probe"]["widgets"] == 8
    assert getattr(_load(tmp_path, site=text), "probe_widgets") == 8  # the example is a site config that loads


def test_site_only_is_the_schemas_word(tmp_path: Path) -> None:
    site_only = [key.path for key in config_schema.SCHEMA if key.site_only]
    assert {"locked", "enabled", "audit.log", "enforcement.unguarded_training"} <= set(site_only)
    for path in site_only:
        table, _, name = path.rpartition(".")
        value = config_schema.KEYS[path].default
        line = f"{name} = {'true' if value is True else 'false' if value is False else repr(value).replace(chr(39), chr(34))}"
        user = f"[{table}]\n{line}\n" if table else f"{line}\n"
        with pytest.raises(UsageError, match=f"'{path}' belongs in the site config only"):
            _load(tmp_path, user=user)


def test_enforcement_is_read_through_the_schema() -> None:
    from guarded_sbatch.site.enforcement import EnforcementPolicy, policy_from_table

    defaults = EnforcementPolicy()
    for key in config_schema.SCHEMA:
        if key.path.startswith("enforcement."):
            value = getattr(defaults, key.path.removeprefix("enforcement."))
            assert value == (tuple(key.default) if isinstance(key.default, list) else key.default), key.path
    with pytest.raises(UsageError, match="x: 'enforcement.tag' must not be empty"):
        policy_from_table({"tag": "  "}, "x")
    with pytest.raises(UsageError, match="'enforcement.training_commands' must be a list of non-empty strings"):
        policy_from_table({"training_commands": ["run.sh", ""]}, "x")
    with pytest.raises(UsageError, match="unknown key 'enforcement.tags'; did you mean .?tag"):
        policy_from_table({"tags": "t"}, "x")
    assert policy_from_table({"unguarded_training": "reject", "tag": " t "}, "x").tag == "t"
