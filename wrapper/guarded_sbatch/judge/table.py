"""The judge's thresholds as a config table: `[judge]` in the site or user config (docs/judge.md names them all).

`policy_from_table` checks every name against JudgePolicy's fields and every value against its valid range, and
says what is wrong in one line (the name, the value, the range, the default); `policy_table` is the inverse (the
values that differ from the defaults), which a guarded launch records with its run so that a requeued or
restarted sidecar judges with the same thresholds whatever the config says by then.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Mapping
from typing import Any

from guarded_sbatch.core.errors import UsageError
from guarded_sbatch.judge.keys import Direction
from guarded_sbatch.judge.policy import JudgePolicy

_FIELDS = {f.name: f for f in dataclasses.fields(JudgePolicy)}
_NAMES = ("train_loss_key", "key_metric")  # metric names (strings)
_DIRECTIONS = {"min": Direction.LOWER_IS_BETTER, "max": Direction.HIGHER_IS_BETTER}
_ANY_NUMBER = ("target", "baseline", "chance_loss")  # values of the key metric: any finite number
_FRACTIONS = ("loss_scale_min_skip_rate", "relative_noise_floor", "plateau_min_improvement",
              "plateau_chance_tolerance", "eval_flat_rel", "stall_min_progress", "frozen_rel",
              "chance_stuck_tolerance", "batch_spread_max")  # in (0, 1]
_RATIOS = ("spike_min_ratio", "divergence_ratio", "grad_explosion_ratio", "short_jump_ratio",
           "nonfinite_after_explosion_ratio", "lr_restart_ratio", "chance_multiple", "first_loss_multiple",
           "spike_memory_ratio")  # at least 1
_FROM_ZERO = ("plateau_max_first_step", "loss_scale_floor", "nonfinite_hold_intervals", "stall_pace_factor")  # may be 0
MAX_VALUE = 1e9


def valid_range(name: str) -> str:
    """The valid values of a [judge] threshold, in words."""
    if name in _NAMES:
        return "a metric key (a string)"
    if name == "key_metric_direction":
        return '"min" or "max"'
    if name in _ANY_NUMBER:
        return "any finite number"
    if name in _FRACTIONS:
        return "a number in (0, 1]"
    if name in _RATIOS:
        return f"a number from 1 to {MAX_VALUE:g}"
    kind = "a whole number" if _FIELDS[name].type in ("int", int) else "a number"
    low = "0" if name in _FROM_ZERO else ("1" if "whole" in kind else "above 0")
    return f"{kind} from {low} to {MAX_VALUE:g}" if low != "above 0" else f"{kind} above 0, at most {MAX_VALUE:g}"


def _check(name: str, value: Any, where: str) -> Any:
    default = _FIELDS[name].default

    def bad() -> UsageError:
        shown = f"{value!r}" if isinstance(value, str) else str(value)
        return UsageError(f"{where}: [judge] {name} = {shown} is not valid: give {valid_range(name)} "
                          f"(default {default!r})")

    if name in _NAMES:
        if not isinstance(value, str) or not value.strip() or len(value) > 200:
            raise bad()
        return value
    if name == "key_metric_direction":
        if value not in _DIRECTIONS:
            raise bad()
        return _DIRECTIONS[value]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise bad()
    if name in _ANY_NUMBER:
        return float(value)
    whole = _FIELDS[name].type in ("int", int)
    if whole and value != int(value):
        raise bad()
    low_ok = value >= 0 if name in _FROM_ZERO else (value >= 1 if whole or name in _RATIOS else value > 0)
    high = 1.0 if name in _FRACTIONS else MAX_VALUE
    if not low_ok or value > high:
        raise bad()
    return int(value) if whole else float(value)


def policy_from_table(table: Mapping[str, Any], *, where: str = "config",
                      base: JudgePolicy | None = None) -> JudgePolicy:
    """A JudgePolicy from a `[judge]` table (over `base`, else the defaults); one clear UsageError when a name is
    unknown or a value out of its range."""
    changes: dict[str, Any] = {}
    for name, value in table.items():
        if name not in _FIELDS:
            close = difflib.get_close_matches(name, list(_FIELDS), n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            raise UsageError(f"{where}: [judge] has no threshold named {name!r}; {hint}the names are listed in "
                             "docs/judge.md")
        changes[name] = _check(name, value, where)
    return dataclasses.replace(base or JudgePolicy(), **changes)


def policy_table(policy: JudgePolicy) -> dict[str, Any]:
    """The thresholds that differ from the defaults, as a table `policy_from_table` reads back."""
    table: dict[str, Any] = {}
    for name, spec in _FIELDS.items():
        value = getattr(policy, name)
        if value != spec.default:
            table[name] = value.value if isinstance(value, Direction) else value
    return table


def recorded_policy(table: Mapping[str, Any], run_name: str) -> JudgePolicy:
    """The thresholds a guarded run was launched with (its record's `[judge]`), which every watcher of it judges
    with (its sidecar, a requeued one, the shared monitor, `show`); a table edited by hand into something invalid
    gives the defaults, never an unwatched run."""
    try:
        return policy_from_table(table, where=f"run record of {run_name}")
    except UsageError:
        return JudgePolicy()


# config keys whose value is the number of classes a cross-entropy chooses among (first found wins)
CHANCE_KEYS = ("vocab_size", "padded_vocab_size", "n_vocab", "num_labels", "num_classes", "n_classes", "num_class",
               "nc")


def chance_from_config(values: Mapping[str, Any] | None) -> tuple[float, str] | None:
    """(ln k, "ln(<key> = k)") from a run's flat config ({"model.vocab_size": 1024, ...}); None when it names no
    number of classes of 2 or more."""
    if not values:
        return None
    found: dict[str, tuple[str, int]] = {}
    for key, value in values.items():
        name = str(key).rsplit(".", 1)[-1].replace("-", "_").lower()
        if name in CHANCE_KEYS and name not in found and not isinstance(value, bool):
            try:
                count = int(value)
            except (TypeError, ValueError):
                continue
            if count >= 2 and count == value:
                found[name] = (str(key), count)
    for name in CHANCE_KEYS:
        if name in found:
            key, count = found[name]
            return math.log(count), f"ln({key} = {count})"
    return None


def with_chance(table: dict[str, Any], run_config: Mapping[str, Any] | None) -> dict[str, Any]:
    """The recorded [judge] table with `chance_loss` from the run's config when the table does not set it (the site
    or user config's [judge] chance_loss wins)."""
    if "chance_loss" in table:
        return table
    found = chance_from_config(run_config)
    return {**table, "chance_loss": round(found[0], 6)} if found is not None else table
