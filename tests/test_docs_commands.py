"""The README and the docs are true to the code: every `guarded-sbatch …` command they show names a subcommand that
exists, and every option it gives is one that subcommand (or, for a launch, guarded-sbatch's guard options and
sbatch's own grammar) accepts; every page they link to exists; the README stays short."""

from __future__ import annotations

import re
import shlex
from functools import cache
from pathlib import Path

from cli_runner import run_cli
from guarded_sbatch.sbatch.guard_options import ALIASES as GUARD_ALIASES, guard_flags
from guarded_sbatch.sbatch.spec import ALIASES, SBATCH_OPTIONS

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SUBCOMMANDS = ("check", "monitor", "show", "run", "check-sweep", "stop", "status", "kill", "restart", "reference",
               "admin", "sidecar")
LAUNCH_WORDS = {f"--{name}" for name in SBATCH_OPTIONS} | {f"--{name}" for name in ALIASES} | set(guard_flags()) | \
    set(GUARD_ALIASES) | {"--help", "--version"}


def commands(text: str) -> list[str]:
    """`guarded-sbatch …` as the page shows it: inline code spans and lines of code blocks."""
    found = re.findall(r"`(guarded-sbatch [^`]+)`", text)
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, re.S):
        found += [line.strip() for line in block.splitlines() if line.strip().startswith("guarded-sbatch ")]
    return [command.split(" # ")[0].split("   (")[0] for command in found]


@cache
def help_text(subcommand: str) -> str:
    done = run_cli([subcommand, "--help"])
    assert done.returncode == 0, f"guarded-sbatch {subcommand} --help exited {done.returncode}: {done.stderr}"
    return done.stdout + done.stderr


def options_of(command: str) -> tuple[str | None, list[str]]:
    try:
        words = shlex.split(re.sub(r"[][|]", " ", command))[1:]
    except ValueError:
        words = re.sub(r"[][|]", " ", command).split()[1:]
    subcommand = words[0] if words and words[0] in SUBCOMMANDS else None
    options = [w.split("=")[0] for w in words if re.fullmatch(r"--[a-z][a-z0-9-]*(=.*)?", w)]
    if subcommand is None:  # a launch: its options end at the script or launcher, the rest is the script's
        stop = next((i for i, w in enumerate(words) if not w.startswith("-") and
                     (w.endswith((".sh", ".py")) or w in {"torchrun", "accelerate", "deepspeed", "python", "--"})),
                    len(words))
        options = [w.split("=")[0] for w in words[:stop] if w.startswith("--")]
    if subcommand == "run" and "--" in words:
        options = [w.split("=")[0] for w in words[:words.index("--")] if w.startswith("--") and w != "--"]
    return subcommand, options


def test_every_command_the_docs_show_exists_with_the_options_it_gives() -> None:
    wrong: list[str] = []
    for page in PAGES:
        for command in commands(page.read_text(encoding="utf-8")):
            subcommand, options = options_of(command)
            if subcommand is None:
                wrong += [f"{page.name}: `{command}`: {o} is no sbatch or guard option" for o in options
                          if o not in LAUNCH_WORDS]
                continue
            text = help_text(subcommand)
            accepted = set(re.findall(r"--[a-z][a-z0-9-]*", text)) | (set(guard_flags()) if subcommand in {
                "check", "run", "restart", "check-sweep"} else set()) | (LAUNCH_WORDS if subcommand == "check" else set())
            wrong += [f"{page.name}: `{command}`: {subcommand} has no {o}" for o in options if o not in accepted]
    assert not wrong, "\n".join(wrong)


def test_the_docs_link_to_pages_that_exist_and_the_readme_is_short() -> None:
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#:]+\.md)\)", page.read_text(encoding="utf-8")):
            assert (page.parent / target).exists(), f"{page.name} links to {target}, which is not there"
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 200
    assert "scripts/demo" in readme and "scripts/test" in readme and "scripts/install" in readme
