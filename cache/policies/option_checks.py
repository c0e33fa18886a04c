"""Checking a cache policy's options where the policy is built: one checker for every policy.

A policy's options come from `[models.engine] policy_options` (or the simulator), as TOML
gives them: a string where a number was meant, a quoted "false", a negative duration.
Each policy checks its options when it is built (`make_policy`), which is what the
gateway's start and a reload run (shards/engine_options.py, `check_policy_options`), so a
bad one is one line there, not a worker's traceback on the first reply that uses it.

Invariant: `check_option` returns only when the value is of its rule's kind, a number
(an int or a float, never a bool) finite and within the rule's bounds, a count an int
(never a bool) at least its minimum, a flag a bool (never a string or a number), a choice
one of its choices; otherwise it raises PolicyOptionError, whose message names
`policy_options.<key>`, what it must be and the value given. `check_not_above` returns
only when an option that another bounds (`cold_ttl_s` by `max_ttl_s`) is at most that
one, each already checked alone; otherwise its PolicyOptionError names both keys, why the
one bounds the other, and both values.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

NUMBER, COUNT, FLAG, CHOICE = "number", "count", "flag", "choice"


class PolicyOptionError(ValueError):
    """A policy option of the wrong type or out of its range; the message names it."""


@dataclass(frozen=True, slots=True)
class OptionRule:
    """What one option must be. `kind`: NUMBER, COUNT, FLAG or CHOICE; a NUMBER or COUNT
    is at least `minimum` (above it when `above`) and at most `maximum` when set; a
    CHOICE one of `choices`."""

    kind: str = NUMBER
    minimum: float = 0.0
    above: bool = False
    maximum: float | None = None
    choices: tuple[str, ...] = ()

    def wants(self) -> str:
        """What a value must be, as the error says it."""
        if self.kind == FLAG:
            return "must be true or false"
        if self.kind == CHOICE:
            return f"must be one of {', '.join(self.choices)}"
        if self.maximum is not None:
            return f"must lie in [{self.minimum:g}, {self.maximum:g}] (a number)"
        bound = f"{'>' if self.above else '>='} {self.minimum:g}"
        return f"must be an integer {bound}" if self.kind == COUNT else f"must be a number {bound} (and finite)"

    def accepts(self, value: object) -> bool:
        """Whether `value` is what `wants` says (an int of any size is finite)."""
        if self.kind == FLAG:
            return isinstance(value, bool)
        if self.kind == CHOICE:
            return isinstance(value, str) and value in self.choices
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if self.kind == COUNT and not isinstance(value, int):
            return False
        if isinstance(value, float) and not math.isfinite(value):
            return False
        if value < self.minimum or (self.above and value == self.minimum):
            return False
        return self.maximum is None or value <= self.maximum


POSITIVE = OptionRule(above=True)             # a duration or factor the code divides by or needs > 0
NON_NEGATIVE = OptionRule()                   # a duration, weight or margin where 0 means "none"
FRACTION = OptionRule(maximum=1.0)            # a probability, quantile or share
COUNT_RULE = OptionRule(kind=COUNT)           # a number of events, >= 0
FLAG_RULE = OptionRule(kind=FLAG)


def check_option(key: str, value: object, rule: OptionRule) -> None:
    """Raise PolicyOptionError unless `value` suits `rule` (see the module docstring)."""
    if not rule.accepts(value):
        raise PolicyOptionError(f"policy_options.{key} {rule.wants()}, not {value!r}")


def check_not_above(key: str, value: float, bound_key: str, bound: float, why: str) -> None:
    """Raise PolicyOptionError when option `key`'s `value` exceeds option `bound_key`'s
    `bound` (both already checked alone): a contradictory pair, refused as a bad knob is,
    `why` saying what the bound means."""
    if value > bound:
        raise PolicyOptionError(f"policy_options.{key} must be at most policy_options.{bound_key} ({why}), "
                                f"not {value!r} > {bound!r}")
