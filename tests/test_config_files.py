"""load_structured_file: YAML / JSON / TOML read by suffix, and one clear UsageError for every file it refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from guarded_sbatch.core.errors import UsageError
from guarded_sbatch.launch.runconfig import MAX_CONFIG_BYTES, MAX_NESTING, load_structured_file


@pytest.mark.parametrize(("name", "text", "expected"), [
    ("c.yaml", "train:\n  lr: 0.001\n  tags: [a, b]\n", {"train": {"lr": 0.001, "tags": ["a", "b"]}}),
    ("c.yml", "", None),
    ("c.JSON", '{"lr": 3e-4, "epochs": 2}', {"lr": 3e-4, "epochs": 2}),
    ("c.toml", "[train]\nlr = 0.1\n", {"train": {"lr": 0.1}}),
    ("c.cfg", "lr: 2\n", {"lr": 2}),  # any other suffix is read as YAML
])
def test_each_format_is_read_by_its_suffix(tmp_path: Path, name: str, text: str, expected: object) -> None:
    path = tmp_path / name
    path.write_text(text)
    assert load_structured_file(path) == expected


@pytest.mark.parametrize(("name", "content", "message"), [
    ("bad.json", b'{"lr": 1,\n "x": }', r"^config .*bad\.json is not valid JSON: Expecting value at line 2; fix that line$"),
    ("bad.toml", b"lr = \n", r"^config .*bad\.toml is not valid TOML: .*; fix that line$"),
    ("bad.yaml", b"a: 1\nb: [1, 2\nc: 3\n", r"^config .*bad\.yaml is not valid YAML at line \d+: .*; fix that line$"),
    ("latin.yaml", "lr: caf\u00e9\n".encode("latin-1"), r"^config .*latin\.yaml is not UTF-8 text; is it the right file\?$"),
    ("deep.json", b"[" * (MAX_NESTING + 1) + b"]" * (MAX_NESTING + 1),
     rf"^config .*deep\.json is nested more than {MAX_NESTING} levels deep; that is not a training config$"),
    ("bomb.yaml", b"a: &a [x, x, x, x, x, x, x, x, x]\n" + b"".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
        f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n".encode()
        for i in range(8)), r"^config .*bomb\.yaml is not read: .*; that is not a training config$"),
])
def test_a_malformed_file_is_one_line_naming_the_file(tmp_path: Path, name: str, content: bytes, message: str) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(UsageError, match=message):
        load_structured_file(path)


def test_a_huge_file_a_missing_file_and_a_folder_are_refused_before_parsing(tmp_path: Path) -> None:
    huge = tmp_path / "huge.yaml"
    huge.write_bytes(b"#" * (MAX_CONFIG_BYTES + 1))
    with pytest.raises(UsageError, match=rf"^config .*huge\.yaml is {MAX_CONFIG_BYTES + 1} bytes; that is not a "):
        load_structured_file(huge)
    with pytest.raises(UsageError, match=r"^cannot read config .*absent\.yaml: No such file or directory$"):
        load_structured_file(tmp_path / "absent.yaml")
    with pytest.raises(UsageError, match=r"^cannot read config .*: Is a directory$"):
        load_structured_file(tmp_path)


@pytest.mark.parametrize("named", [True, False])
def test_the_preflight_on_an_unreadable_config_names_the_fix_in_the_file_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, named: bool) -> None:
    """An invalid YAML config, named with --guard-config or on the launcher line: the finding is the file's own
    problem and its fix; it does not ask to name a config that was named."""
    import os

    from guarded_sbatch.core.config import Config
    from guarded_sbatch.launch.preflight import run_preflight
    from guarded_sbatch.sbatch.argv import split_sbatch_argv

    monkeypatch.setenv("GUARDED_SBATCH_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "bad.yaml").write_text("lr: [1, 2\nbatch: 3\n")
    (tmp_path / "train.py").write_text("print(1)\n")
    (tmp_path / "t.sh").write_text("#!/bin/bash\n#SBATCH --time=10\npython train.py --config bad.yaml\n")
    words = ["--job-name=synthetic-mlp-bs64-lr3e-4", *(["--guard-config", "bad.yaml"] if named else []), "t.sh"]
    report = run_preflight(split_sbatch_argv(words), Config(), None, cwd=tmp_path, env={"PATH": os.environ["PATH"]})
    diff = next(r for r in report.results if r.name == "config-diff")
    assert diff.finding.endswith("is not valid YAML at line 2: expected ',' or ']', but got ':'; fix that line"), \
        diff.finding
    assert "--guard-config" not in diff.finding and "config-diff" in report.blocking_checks
