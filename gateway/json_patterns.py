"""String `pattern`s a structured reply is held to (pydantic's `Field(pattern=…)`,
`constr(pattern=…)`): a string is checked whole, as jsonschema checks it (a search,
unanchored), and one that does not match is replaced by a string the pattern's parse tree
spells (`json_spelling`): the shortest (`shortest_match`), or one whose length meets the
schema's `minLength`/`maxLength` too (`match_within`), so the reply still validates.

Every check is bounded (`HeldPattern.matches`, `search_bounded`): it runs on the event
loop, and a pattern with nested quantifiers (`^(a+)+b$`) backtracks for a time that
doubles with each character in Python's `re`. The checks use the `regex` module (the same
syntax, compiled as `regex.V0`, Python's `re` flavour) with a time limit of
MATCH_TIMEOUT_S; a check that runs past it counts as no match, so the filler falls back to
a string it spells itself.

Only patterns Python compiles and this module can spell are held (`usable_pattern`); the
others leave the schema to the whole-reply path, as before. Invariants: `shortest_match(p)`
and `match_within(p, …)` are None or strings `p.matches`; a check takes about
MATCH_TIMEOUT_S at most, whatever the pattern and the text.
"""
from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from re import _parser as sre_parse

import regex

from gateway.json_spelling import (MAX_SPELLED_LENGTH, Speller, Unspellable, anchored, ascending_bits,
                                   expanded_size, padded_tree)

MATCH_TIMEOUT_S = 0.02   # one pattern check's time at most (a timed-out check is no match)
MAX_PATTERN_SIZE = 20_000   # a pattern larger with its counted repeats written out is not compiled
SPARE_LENGTH = 64        # lengths tried past `minLength` when there is no `maxLength`
MAX_LENGTH_TRIES = 24    # lengths whose spelling is checked against the pattern, at most
FILL = "-"               # what an unanchored pattern's longer string is filled with (json_bounds.PAD)


def bounded_engine(pattern: str) -> tuple["regex.Pattern", sre_parse.SubPattern] | None:
    """`pattern` (Python `re` syntax, as jsonschema reads it) compiled by `regex` for
    bounded checks, with its parse tree; None for a pattern Python refuses, or one too large
    to compile on the event loop (over MAX_PATTERN_SIZE with its counted repeats written
    out, `expanded_size`)."""
    try:
        with warnings.catch_warnings():   # "possible nested set" and the like: Python's, not the client's
            warnings.simplefilter("ignore")
            tree = sre_parse.parse(pattern, re.compile(pattern).flags)
            if expanded_size(tree, MAX_PATTERN_SIZE) > MAX_PATTERN_SIZE:
                return None
            return regex.compile(pattern, regex.V0), tree
    except (re.error, regex.error, RecursionError, OverflowError, ValueError, TypeError):   # a count past C's int
        return None


def search_bounded(pattern: str, text: str) -> bool:
    """Whether `pattern` (Python `re` syntax) is found in `text`, checked within
    MATCH_TIMEOUT_S; a check that runs past it, or a pattern `bounded_engine` does not
    compile, counts as not found."""
    compiled = bounded_engine(pattern)
    try:
        return compiled is not None and compiled[0].search(text, timeout=MATCH_TIMEOUT_S) is not None
    except TimeoutError:
        return False


@dataclass(frozen=True, slots=True)
class HeldPattern:
    """A schema's `pattern`, compiled for bounded checks, with its parse tree for spelling."""

    source: str
    engine: regex.Pattern
    tree: sre_parse.SubPattern

    def matches(self, text: str) -> bool:
        """Whether jsonschema's `re.search(source, text)` finds it, checked within
        MATCH_TIMEOUT_S; a check that runs past it counts as no match."""
        try:
            return self.engine.search(text, timeout=MATCH_TIMEOUT_S) is not None
        except TimeoutError:
            return False


def usable_pattern(schema: dict) -> HeldPattern | None:
    """The schema's `pattern`, compiled, when strings can be held to it; else None."""
    pattern = schema.get("pattern")
    compiled = bounded_engine(pattern) if isinstance(pattern, str) else None
    if compiled is None:
        return None
    held = HeldPattern(pattern, *compiled)
    return held if shortest_match(held) is not None else None


def shortest_match(pattern: HeldPattern) -> str | None:
    """A shortest string the pattern matches (each repeat at its fewest copies, each class
    and branch at its first choice that works), or None when it cannot be spelled so."""
    return match_within(pattern, 0, None)


def match_within(pattern: HeldPattern, shortest: int, longest: int | None,
                 accept: Callable[[str], bool] = lambda text: True) -> str | None:
    """A string the pattern matches with `shortest` to `longest` characters (None: no
    most) that `accept` takes too, the shortest such the spelling finds; None where there is
    none it finds (the lengths rule every match out, or the pattern is past spelling).
    Lengths past MAX_SPELLED_LENGTH are not spelled."""
    try:
        least = max(0, min(pattern.tree.getwidth()[0], MAX_SPELLED_LENGTH + 1))
    except (RecursionError, OverflowError):
        return None
    shortest = max(shortest, 0)
    if least > MAX_SPELLED_LENGTH or shortest > MAX_SPELLED_LENGTH:
        return None
    cap = longest if longest is not None else max(shortest, least) + SPARE_LENGTH
    if cap < shortest:
        return None
    start, end = anchored(pattern.tree)
    trees = [pattern.tree] + ([padded_tree(pattern.tree, FILL, not start, not end)] if not start or not end else [])
    for tree in trees:
        try:
            spelled = _first_spelled(Speller(tree, cap), shortest, pattern, accept)
        except (Unspellable, RecursionError, OverflowError, ValueError):
            continue
        if spelled is not None:
            return spelled
    return None


def _first_spelled(speller: Speller, shortest: int, pattern: HeldPattern,
                   accept: Callable[[str], bool]) -> str | None:
    """The first string of the lengths from `shortest` up that the speller spells, the
    pattern matches and `accept` takes; after MAX_LENGTH_TRIES lengths, None."""
    lengths = speller.lengths() >> shortest << shortest
    for tries, length in enumerate(ascending_bits(lengths)):
        if tries >= MAX_LENGTH_TRIES:
            break
        for longest_first in (False, True):   # `^yes|no$` at 9 characters: `no-------` fails, `-------no` not
            spelled = speller.spell(length, longest_first)
            if accept(spelled) and pattern.matches(spelled):
                return spelled
    return None

