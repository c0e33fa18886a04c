"""Values the gateway writes itself, checked against their schema's own keywords: whether a
value meets its schema's type, `enum`, `const`, number bounds, string lengths, typed
`format` and `pattern` (`fits_own_keywords`, what picks a fallback `default` or `enum`
member), and a string that meets its format, pattern and lengths together
(`fitting_string`, the fallback of a string the model did not give).

Invariants: `fits_own_keywords` is what jsonschema decides for those keywords (patterns
checked within `json_patterns.MATCH_TIMEOUT_S`; the keywords of an object's or array's
members are not looked at); `fitting_string(s)` meets every one of `s`'s format, held
pattern and lengths wherever the spelling finds such a string, else as many as it can:
the format first (a client parses it into a typed value), then the pattern, then the
lengths. `OwnKeywords` checks many values against one schema in time linear in their
number and the enum's size (its members as a set of `json_key`s, its pattern compiled once).
"""
from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from gateway.json_bounds import number_fits, string_in_bounds, string_lengths
from gateway.json_formats import PLACEHOLDERS, checked_format, fits_format, format_shape
from gateway.json_patterns import HeldPattern, match_within, shortest_match, usable_pattern

# placeholders tried after the format's own (`PLACEHOLDERS`) when that one breaks the
# lengths or the pattern: shorter ones, and other years and hosts
_MORE_PLACEHOLDERS = {"email": ("a@b.co", "user@example.org"), "date": ("2000-01-01",),
                      "date-time": ("2000-01-01T00:00:00Z",), "ipv4": ("0.0.0.0", "10.0.0.1", "100.100.100.100")}
_JSON_KINDS = {bool: "boolean", str: "string", type(None): "null", dict: "object", list: "array"}


def _kinds_of_value(value: Any) -> set[str]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return {_JSON_KINDS.get(type(value), "")}
    return {"number", "integer"} if isinstance(value, int) or value.is_integer() else {"number"}


def json_equal(a: Any, b: Any) -> bool:
    """JSON equality, as jsonschema's `enum`/`const` decide it (`1 == 1.0`, `True != 1`)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b or _is_number(a) and _is_number(b) and a == b


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def json_key(value: Any) -> Hashable | None:
    """A key that is equal for two JSON values exactly where `json_equal` says they are
    (`1` and `1.0` share one, `True` and `1` do not); None for a value holding a NaN, which
    `json_equal` finds equal to nothing (no key is None). TypeError for what is not JSON."""
    if isinstance(value, bool):
        return ("boolean", value)
    if _is_number(value):
        return None if value != value else ("number", value)
    if isinstance(value, str):
        return ("string", value)
    if value is None:
        return ("null",)
    if isinstance(value, list):
        items = tuple(json_key(item) for item in value)
        return None if None in items else ("array", items)
    if isinstance(value, dict):
        members = frozenset((name, json_key(member)) for name, member in value.items())
        return None if any(key is None for _, key in members) else ("object", members)
    raise TypeError(f"not a JSON value: {type(value).__name__}")


def fits_string(text: str, schema: dict, pattern: HeldPattern | None = None) -> bool:
    """Whether `text` meets the schema's lengths, checked format and held pattern
    (`pattern`, when the caller has compiled it already)."""
    return _fits_string(text, schema, pattern or usable_pattern(schema))


def _fits_string(text: str, schema: dict, pattern: HeldPattern | None) -> bool:
    """`fits_string` with the schema's held pattern given (None: it holds none)."""
    shortest, longest = string_lengths(schema)
    if len(text) < shortest or longest is not None and len(text) > longest:
        return False
    fmt = checked_format(schema)
    if fmt is not None and not fits_format(text, fmt):
        return False
    return pattern is None or pattern.matches(text)


def fits_own_keywords(value: Any, schema: dict) -> bool:
    """Whether `value` meets the schema's `type`, `enum`, `const` and, for a number or a
    string, its bounds, lengths, format and pattern."""
    return OwnKeywords(schema).fits(value)


class OwnKeywords:
    """`fits_own_keywords` for the values of one schema, each in a time independent of the
    size of its `enum` (its members' `json_key`s, a set made at the first value; a member
    that is no JSON value leaves the members scanned one by one, as `json_equal` does) and
    with its pattern compiled once: checking every member of an enum of thousands of
    values is linear, not quadratic (QA134 H2)."""

    def __init__(self, schema: dict) -> None:
        self.schema = schema
        self._members: set | None = None   # the enum's `json_key`s, made at the first value checked
        self._pattern: tuple[HeldPattern | None] | None = None   # `usable_pattern`, found at the first string

    def fits(self, value: Any) -> bool:
        schema = self.schema
        kinds = schema.get("type")
        if kinds is not None and not _kinds_of_value(value) & set([kinds] if isinstance(kinds, str) else kinds):
            return False
        if "const" in schema and not json_equal(value, schema["const"]):
            return False
        if isinstance(schema.get("enum"), list) and not self._listed(value):
            return False
        if _is_number(value):
            return number_fits(value, schema)
        if not isinstance(value, str):
            return True
        if self._pattern is None:
            self._pattern = (usable_pattern(schema),)
        return _fits_string(value, schema, self._pattern[0])

    def _listed(self, value: Any) -> bool:
        """Whether `value` is `json_equal` to a member of the schema's `enum`."""
        members = self.schema["enum"]
        try:
            if self._members is None:
                self._members = {json_key(member) for member in members} - {None}
            key = json_key(value)
            return key is not None and key in self._members
        except (TypeError, RecursionError):   # no JSON value, or nested past the stack: compared one by one
            return any(json_equal(value, member) for member in members)


def fitting_member(schema: dict) -> tuple[bool, Any]:
    """(True, the value) for the schema's `default`, `const` or first `enum` member that
    meets its other keywords, tried in that order; (False, None) where none does."""
    candidates = ([schema["default"]] if "default" in schema else []) + (
        [schema["const"]] if "const" in schema else []) + (
        list(schema["enum"]) if isinstance(schema.get("enum"), list) else [])
    own = OwnKeywords(schema)
    return next(((True, value) for value in candidates if own.fits(value)), (False, None))


def fitting_string(schema: dict) -> str:
    """A string meeting the schema's checked format, held pattern and lengths (see the
    module's invariant for where none is found)."""
    fmt, pattern = checked_format(schema), usable_pattern(schema)
    shortest, longest = string_lengths(schema)
    if fmt is None:
        if pattern is None:
            return string_in_bounds("", schema)
        spelled = match_within(pattern, shortest, longest)
        return spelled if spelled is not None else shortest_match(pattern) or ""
    placeholders = (PLACEHOLDERS[fmt],) + _MORE_PLACEHOLDERS.get(fmt, ())
    found = next((p for p in placeholders if fits_string(p, schema, pattern)), None)
    if found is None and pattern is not None:
        found = _spliced(pattern, placeholders, schema)
    if found is None:   # the format's shape spelled to the lengths (an email of 30 characters)
        shape = usable_pattern({"pattern": f"^(?:{format_shape(fmt)})$"})
        found = shape and match_within(shape, shortest, longest, accept=lambda text: fits_string(text, schema, pattern))
    return found if found is not None else PLACEHOLDERS[fmt]


def _spliced(pattern: HeldPattern, placeholders: tuple[str, ...], schema: dict) -> str | None:
    """A string of the format that the pattern matches: a placeholder with a short match
    of the pattern written over its start, its end or a part of it (`^2025-` on a date:
    `2025-01-01`; `@corp\\.com$` on an email: `user@corp.com`), or a match of the pattern
    that is of the format itself."""
    shortest, longest = string_lengths(schema)
    fmt = checked_format(schema)
    spelled = match_within(pattern, 0, None)
    if spelled:
        for placeholder in placeholders:
            for at in range(len(placeholder) + 1):
                for text in (placeholder[:at] + spelled + placeholder[at + len(spelled):],
                             placeholder[:at] + spelled, spelled + placeholder[at:]):
                    if fits_string(text, schema, pattern):
                        return text
    return match_within(pattern, shortest, longest, accept=lambda text: fmt is None or fits_format(text, fmt))
