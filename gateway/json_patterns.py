"""String `pattern`s a structured reply is held to (pydantic's `Field(pattern=…)`,
`constr(pattern=…)`): a string is checked whole, as jsonschema checks it (`re.search`,
unanchored), and one that does not match is replaced by the shortest string the pattern's
parse tree spells (`shortest_match`), so the reply still validates.

Only patterns Python compiles and this module can spell are held (`usable_pattern`); the
others leave the schema to the whole-reply path, as before. Invariant: `shortest_match(p)`
is None or a string `re.search(p, …)` matches.
"""
from __future__ import annotations

import re
import string
import warnings
from re import _constants as sre   # the parse tree's opcodes (stable since Python 3.11)
from re import _parser as sre_parse

_CANDIDATES = "a0A_ -." + string.ascii_letters + string.digits + string.punctuation
_MAX_REPEAT_SPELLED = 64   # a pattern demanding more repeats than this is not spelled
_CATEGORIES = {
    sre.CATEGORY_DIGIT: lambda c: c.isdigit(), sre.CATEGORY_NOT_DIGIT: lambda c: not c.isdigit(),
    sre.CATEGORY_SPACE: lambda c: c.isspace(), sre.CATEGORY_NOT_SPACE: lambda c: not c.isspace(),
    sre.CATEGORY_WORD: lambda c: c.isalnum() or c == "_",
    sre.CATEGORY_NOT_WORD: lambda c: not (c.isalnum() or c == "_"),
}


def usable_pattern(schema: dict) -> re.Pattern | None:
    """The schema's `pattern`, compiled, when strings can be held to it; else None."""
    pattern = schema.get("pattern")
    if not isinstance(pattern, str):
        return None
    try:
        with warnings.catch_warnings():   # "possible nested set" and the like: Python's, not the client's
            warnings.simplefilter("ignore")
            compiled = re.compile(pattern)
    except (re.error, RecursionError, OverflowError, ValueError):   # e.g. a repeat count past C's int
        return None
    return compiled if shortest_match(compiled) is not None else None


def shortest_match(pattern: re.Pattern) -> str | None:
    """A short string the pattern matches (each repeat at its minimum, each class and
    branch at its first choice that works), or None when it cannot be spelled so."""
    try:
        spelled = _spell(sre_parse.parse(pattern.pattern, pattern.flags))
    except (_Unspellable, RecursionError, re.error, OverflowError, ValueError):
        return None
    return spelled if pattern.search(spelled) is not None else None


class _Unspellable(Exception):
    pass


def _in_set(items: list, char: str) -> bool:
    negate = bool(items) and items[0][0] is sre.NEGATE
    hit = False
    for op, value in items[1:] if negate else items:
        if op is sre.LITERAL:
            hit = hit or char == chr(value)
        elif op is sre.RANGE:
            hit = hit or value[0] <= ord(char) <= value[1]
        elif op is sre.CATEGORY and value in _CATEGORIES:
            hit = hit or _CATEGORIES[value](char)
        else:
            raise _Unspellable(op)
    return hit is not negate


def _one_char(accepts) -> str:
    char = next((c for c in _CANDIDATES if accepts(c)), None)
    if char is None:
        raise _Unspellable("no character")
    return char


def _spell(tree) -> str:
    out = []
    for op, value in tree:
        if op is sre.LITERAL:
            out.append(chr(value))
        elif op is sre.NOT_LITERAL:
            out.append(_one_char(lambda c, v=value: c != chr(v)))
        elif op is sre.ANY:
            out.append("a")
        elif op is sre.IN:
            out.append(_one_char(lambda c, items=value: _in_set(items, c)))
        elif op in (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT):
            least, _, body = value
            if least > _MAX_REPEAT_SPELLED:
                raise _Unspellable("repeat")
            out.append(_spell(body) * least)
        elif op is sre.SUBPATTERN:
            out.append(_spell(value[-1]))
        elif op is sre.ATOMIC_GROUP:
            out.append(_spell(value))
        elif op is sre.BRANCH:
            out.append(_spell(value[1][0]))
        elif op is sre.AT:
            continue   # anchors spell nothing
        else:   # back-references, look-arounds, conditionals
            raise _Unspellable(op)
    return "".join(out)
