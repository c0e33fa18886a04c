"""Whole-value validation of a structured reply or a tool call's arguments (the free try
that is sent as written when it validates, `tool_forcing`, `json_or_calls`), with every
regular expression the schema holds a value to checked within
`json_patterns.MATCH_TIMEOUT_S`.

jsonschema checks `pattern`, `patternProperties` (and the `additionalProperties` beside
them) with Python's `re`, whose backtracking on a pattern with nested quantifiers
(`^(a+)+b$`) doubles with each character: a few dozen of the model's characters block the
event loop for minutes. Here those keywords use `json_patterns.search_bounded`; a check
that runs past its time counts as no match, so the value is not valid and the filler
writes one itself.

`multipleOf` is held as pydantic holds it (`json_bounds.is_multiple`).

Invariant: `is_valid` is jsonschema's verdict (the draft its `$schema` names, strings held
to the formats `json_formats` checks, `multipleOf` as above) wherever each pattern check
ends in time; a schema
that cannot be checked (a `$ref` the request checks did not catch) counts no.
"""
from __future__ import annotations

from typing import Any

from jsonschema import ValidationError, validators
from referencing.exceptions import Unresolvable

from gateway.json_bounds import is_multiple
from gateway.json_formats import format_checker
from gateway.json_patterns import search_bounded


def _pattern(validator, pattern, instance, schema):
    if validator.is_type(instance, "string") and not search_bounded(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator, patterns, instance, schema):
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if search_bounded(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(validator, additional, instance, schema):
    """As jsonschema's, a key matching one of `patternProperties` (checked bounded) not
    being additional."""
    if not validator.is_type(instance, "object"):
        return
    properties, patterns = schema.get("properties", {}), schema.get("patternProperties", {})
    extras = [key for key in instance
              if key not in properties and not any(search_bounded(pattern, key) for pattern in patterns)]
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        yield ValidationError(f"Additional properties are not allowed ({', '.join(map(repr, sorted(extras)))} "
                              "unexpected)")


def _multiple_of(validator, step, instance, schema):
    """As jsonschema's, but a float within a hair of a multiple is one, as pydantic holds
    it (`json_bounds.is_multiple`: jsonschema calls 19.99 no multiple of 0.01)."""
    if validator.is_type(instance, "number") and not is_multiple(instance, step):
        yield ValidationError(f"{instance!r} is not a multiple of {step}")


_BOUNDED = {"pattern": _pattern, "patternProperties": _pattern_properties,
            "additionalProperties": _additional_properties, "multipleOf": _multiple_of}
# each draft's validator class with the bounded keywords (built once: a class per check is slow)
_BOUNDED_VALIDATORS = {cls: validators.extend(cls, _BOUNDED) for cls in (
    validators.Draft3Validator, validators.Draft4Validator, validators.Draft6Validator, validators.Draft7Validator,
    validators.Draft201909Validator, validators.Draft202012Validator)}


def is_valid(value: Any, schema: dict) -> bool:
    """Whether `value` validates against `schema` (see the module's invariant)."""
    cls = validators.validator_for(schema)
    try:
        _BOUNDED_VALIDATORS.get(cls, cls)(schema, format_checker=format_checker()).validate(value)
    except (ValidationError, Unresolvable):
        return False
    return True
