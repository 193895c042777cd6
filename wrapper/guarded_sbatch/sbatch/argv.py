"""Split a guarded-sbatch command line into our own options, sbatch's options, the script and its args.

The words are exactly what the user would give sbatch. Our own options carry a `--guard-` prefix (sbatch has
no such option) and may come before or among sbatch's options, never after the script: everything after the
script belongs to the script. sbatch's options are parsed the way sbatch's getopt_long does (separate or
attached values, clustered short flags, unambiguous long prefixes, `--` ends the options), so that we know
where the script is; they are handed on unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from guarded_sbatch.core.errors import UsageError
from guarded_sbatch.core.suggest import did_you_mean
from guarded_sbatch.sbatch.guard_options import (
    ALIASES,
    GuardOptions,
    Waiver,
    build_guard_options,
    guard_flags,
    guard_option,
    take_guard_option,
)
from guarded_sbatch.sbatch.spec import (
    SBATCH_OPTIONS,
    SHORT_TO_LONG,
    ArgKind,
    canonical_name,
    long_candidates,
    resolve_long_name,
)

INFO_ONLY_OPTIONS = frozenset({"help", "usage", "version"})


@dataclass(frozen=True)
class ParsedOption:
    """One sbatch option: its long name, its value (None for a flag) and the words it came from."""

    name: str
    value: str | None
    words: tuple[str, ...]


@dataclass(frozen=True)
class LaunchArgs:
    guard_options: GuardOptions
    sbatch_options: tuple[str, ...]  # the user's sbatch option words, exactly as given
    script: Path | None  # None with --wrap, or for --help/--usage/--version
    script_args: tuple[str, ...] = ()
    parsed_options: tuple[ParsedOption, ...] = field(default=(), compare=False)
    guard_words: tuple[str, ...] = ()  # our own options' words, exactly as given (to repeat the launch)

    @property
    def wrap(self) -> str | None:
        for option in self.parsed_options:
            if option.name == "wrap":
                return option.value
        return None

    @property
    def info_only(self) -> bool:
        """sbatch would only print help or its version: nothing to check or submit."""
        return any(option.name in INFO_ONLY_OPTIONS for option in self.parsed_options)


def parse_sbatch_words(words: Sequence[str], *, where: str = "command line") -> tuple[list[ParsedOption], int]:
    """Parse sbatch options from the start of `words`; return them and the index of the first non-option.

    Raises UsageError for an unknown or ambiguous option or a missing value. An unknown long option written
    `--name=value` is kept as given (a newer sbatch may know it).
    """
    parsed: list[ParsedOption] = []
    index = 0
    while index < len(words):
        word = words[index]
        if word == "--":
            return parsed, index + 1
        if word == ":":  # heterogeneous job separator
            parsed.append(ParsedOption(":", None, (word,)))
            index += 1
            continue
        if word.startswith("-") and word != "-":
            options, index = parse_one_option(words, index, where)
            parsed.extend(options)
        else:
            return parsed, index
    return parsed, index


def parse_one_option(words: Sequence[str], index: int, where: str) -> tuple[list[ParsedOption], int]:
    """Parse the option word at words[index] (and its separate value, if it takes one)."""
    if words[index].startswith("--"):
        option, next_index = _parse_long(words, index, where)
        return [option], next_index
    return _parse_short_cluster(words, index, where)


def _parse_long(words: Sequence[str], index: int, where: str) -> tuple[ParsedOption, int]:
    word = words[index]
    body = word[2:]
    typed_name, has_value, attached = body.partition("=")
    name = resolve_long_name(typed_name)
    if name is None:
        candidates = long_candidates(typed_name)
        if len(candidates) > 1:
            raise UsageError(f"ambiguous sbatch option --{typed_name} ({where}): could be --{', --'.join(candidates)}")
        if has_value:
            return ParsedOption(typed_name, attached, (word,)), index + 1
        raise UsageError(
            f"unknown sbatch option --{typed_name} ({where}); {did_you_mean(typed_name, SBATCH_OPTIONS, prefix='--')}"
            f"check its spelling, or if your sbatch knows it write it as --{typed_name}=VALUE"
        )
    kind = SBATCH_OPTIONS[name][1]
    canonical = canonical_name(name)
    if kind is ArgKind.NONE:
        if has_value:
            raise UsageError(f"sbatch option --{name} takes no value ({where}): remove '={attached}'")
        return ParsedOption(canonical, None, (word,)), index + 1
    if has_value:
        return ParsedOption(canonical, attached, (word,)), index + 1
    if kind is ArgKind.OPTIONAL:
        return ParsedOption(canonical, None, (word,)), index + 1
    if index + 1 >= len(words):
        raise UsageError(f"sbatch option --{name} needs a value ({where}): e.g. --{name}=VALUE")
    return ParsedOption(canonical, words[index + 1], (word, words[index + 1])), index + 2


def _parse_short_cluster(words: Sequence[str], index: int, where: str) -> tuple[list[ParsedOption], int]:
    word = words[index]
    parsed: list[ParsedOption] = []
    position = 1
    while position < len(word):
        letter = word[position]
        name = SHORT_TO_LONG.get(letter)
        if name is None:
            raise UsageError(f"unknown sbatch option -{letter} in '{word}' ({where}); see `sbatch --help`")
        kind = SBATCH_OPTIONS[name][1]
        rest = word[position + 1 :]
        if kind is ArgKind.NONE:
            parsed.append(ParsedOption(name, None, (f"-{letter}",)))
            position += 1
            continue
        if kind is ArgKind.OPTIONAL:  # -k: a value only when attached
            parsed.append(ParsedOption(name, rest or None, (f"-{letter}{rest}",)))
            return _restore_words(parsed, word), index + 1
        if rest:
            parsed.append(ParsedOption(name, rest, (f"-{letter}{rest}",)))
            return _restore_words(parsed, word), index + 1
        if index + 1 >= len(words):
            raise UsageError(f"sbatch option -{letter} (--{name}) needs a value ({where})")
        parsed.append(ParsedOption(name, words[index + 1], (f"-{letter}", words[index + 1])))
        return _restore_words(parsed, word, words[index + 1]), index + 2
    return _restore_words(parsed, word), index + 1


def _restore_words(parsed: list[ParsedOption], word: str, separate_value: str | None = None) -> list[ParsedOption]:
    """A single option keeps its original words; a cluster (`-Hvp gpu`) keeps the whole cluster on its first."""
    if len(parsed) == 1:
        only = parsed[0]
        original = (word, separate_value) if separate_value is not None else (word,)
        return [ParsedOption(only.name, only.value, original)]
    return parsed


def split_sbatch_argv(argv: list[str]) -> LaunchArgs:
    """Split `guarded-sbatch [guard options] [sbatch options] script [script args]`."""
    guard_words: list[tuple[str, str | None]] = []
    guard_argv: list[str] = []
    sbatch_words: list[str] = []
    parsed: list[ParsedOption] = []
    index = 0
    while index < len(argv):
        word = argv[index]
        guard_name, _, _ = word.partition("=")
        if guard_option(guard_name) is not None or word in ALIASES:
            start = index
            index = take_guard_option(argv, index, guard_words)
            guard_argv.extend(argv[start:index])
            continue
        if word.startswith("--guard-"):
            raise UsageError(
                f"unknown option {guard_name}; {did_you_mean(guard_name, guard_flags())}"
                f"guarded-sbatch's own options are {', '.join(guard_flags())}"
            )
        if word == ":":  # heterogeneous job separator: more sbatch options follow
            sbatch_words.append(word)
            parsed.append(ParsedOption(":", None, (word,)))
            index += 1
            continue
        if word == "--":
            sbatch_words.append(word)
            index += 1
            break
        if not word.startswith("-") or word == "-":
            break
        options, next_index = parse_one_option(argv, index, "command line")
        sbatch_words.extend(argv[index:next_index])
        parsed.extend(options)
        index = next_index
    rest = argv[index:]
    guard = build_guard_options(guard_words)
    wrap = next((option.value for option in parsed if option.name == "wrap"), None)
    info_only = any(option.name in INFO_ONLY_OPTIONS for option in parsed)
    if wrap is not None:
        if rest:
            raise UsageError("script arguments are not allowed with --wrap (sbatch refuses them too); drop them")
        return LaunchArgs(guard, tuple(sbatch_words), None, (), tuple(parsed), tuple(guard_argv))
    if not rest:
        if info_only:
            return LaunchArgs(guard, tuple(sbatch_words), None, (), tuple(parsed), tuple(guard_argv))
        raise UsageError(
            "no batch script given: name the script file after the sbatch options "
            "(guarded-sbatch cannot check a script read from stdin)"
        )
    script_word = rest[0]
    if script_word == "":
        raise UsageError("the batch script name is empty; give the path to the script file")
    return LaunchArgs(guard, tuple(sbatch_words), Path(script_word), tuple(rest[1:]), tuple(parsed), tuple(guard_argv))


__all__ = ["GuardOptions", "LaunchArgs", "ParsedOption", "Waiver", "parse_one_option",
           "parse_sbatch_words", "split_sbatch_argv"]
