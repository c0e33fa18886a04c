"""Pydantic validation errors as OpenAI's 400s (`gateway.schemas.validate`).

Invariant: every `ValidationError` becomes one `ApiError` (400, `invalid_request_error`)
naming the offending field as OpenAI names params (`messages[0].role`); its `code` is
OpenAI's where OpenAI has one for the failure: a number past a bound is
`integer_above_max_value` / `integer_below_min_value` (an integer bound) or
`decimal_above_max_value` / `decimal_below_min_value` (a float one), a list past its
length bounds `array_above_max_length` / `array_below_min_length` (`empty_array` when
it is empty), a missing field `missing_required_parameter`, a check of ours raised as a
`PydanticCustomError` whose type is one of `OWN_CODES` that code with its own message,
a value of a type no member of a union field takes is named by the field, never by a
member's tag (`input`, not `input.str`), and is `invalid_type` with OpenAI's wording where
the model says what the field takes (`EXPECTED_TYPES`, gateway.schemas.validate); anything
else is `invalid_value`.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gateway.errors import ApiError

# codes a validator of ours raises as `PydanticCustomError(code, message)`: its message is the whole error's
OWN_CODES = frozenset({"unsupported_parameter"})

_ABOVE = {"less_than_equal": "<=", "less_than": "<"}
_BELOW = {"greater_than_equal": ">=", "greater_than": ">"}
_BOUND_KEYS = {"less_than_equal": "le", "less_than": "lt", "greater_than_equal": "ge", "greater_than": "gt"}
_VALUE_NOUNS = ((str, "a string"), (int, "an integer"), (float, "a number"), (list, "an array"), (dict, "an object"))


def param_path(loc: tuple, body: Any, *, is_missing: bool = False) -> str:
    """('messages', 0, 'role') -> 'messages[0].role', as OpenAI names params. A part of
    `loc` that is not a key or index of `body` at that depth is pydantic's tag of a union
    member or validator ('str', 'NamedToolChoice', 'function-after[...]') and is left out,
    wherever it is (a union's last tag too: an object `input` is `input`, not `input.str`,
    QA224 F6); only the last part of a missing field's error (`is_missing`) may name a key
    the body lacks."""
    path = ""
    value = body
    for i, part in enumerate(loc):
        if isinstance(part, int) and isinstance(value, list) and 0 <= part < len(value):
            path, value = path + f"[{part}]", value[part]
        elif isinstance(part, str) and isinstance(value, dict) and (
                part in value or (is_missing and i == len(loc) - 1)):
            path, value = (f"{path}.{part}" if path else part), value.get(part)
    return path


def most_telling(errors: list) -> dict:
    """Of pydantic's errors, the one to report: among those of the first error's field,
    the one that got deepest into the value (for a union, the member the input's shape
    matched: a dict `tool_choice` missing its `function`, not "should be 'auto'"), a
    failed constraint before a type mismatch ("at most 4 items" for a list `stop`, not
    "should be a valid string"), else the first."""
    head = errors[0]["loc"][:1]
    same_field = [e for e in errors if e["loc"][:1] == head]
    return max(same_field, key=lambda e: (len(e["loc"]), not e["type"].endswith("_type")))


def _number(value: Any) -> str:
    """A bound or an input as OpenAI's messages write it: 2.0 as "2", 2.5 as "2.5"."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def _openai_bound(error: dict, param: str) -> tuple[str, str] | None:
    """OpenAI's (code, message) for a number or list past its bound; None for any other failure."""
    kind, ctx = error["type"], error.get("ctx") or {}
    if kind in _BOUND_KEYS and _BOUND_KEYS[kind] in ctx:
        bound = ctx[_BOUND_KEYS[kind]]
        number = "decimal" if isinstance(bound, float) else "integer"
        above = kind in _ABOVE
        code = f"{number}_{'above_max' if above else 'below_min'}_value"
        side = "above maximum" if above else "below minimum"
        relation = _ABOVE.get(kind) or _BELOW[kind]
        return code, (f"Invalid '{param}': {number} {side} value. Expected a value {relation} {_number(bound)}, "
                      f"but got {_number(error.get('input'))} instead.")
    if kind in ("too_long", "too_short") and ctx.get("field_type") == "List":
        length = ctx.get("actual_length")
        if kind == "too_long":
            return "array_above_max_length", (
                f"Invalid '{param}': array too long. Expected an array with maximum length {ctx.get('max_length')}, "
                f"but got an array with length {length} instead.")
        if length == 0:
            return "empty_array", (f"Invalid '{param}': empty array. Expected an array with minimum length "
                                   f"{ctx.get('min_length')}, but got an empty array instead.")
        return "array_below_min_length", (
            f"Invalid '{param}': array too short. Expected an array with minimum length {ctx.get('min_length')}, "
            f"but got an array with length {length} instead.")
    return None


def _value_noun(value: Any) -> str:
    """What a JSON value is, as OpenAI's "but got ... instead" names it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return next((noun for kind, noun in _VALUE_NOUNS if isinstance(value, kind)), "a value")


def _union_type_error(errors: list, first: dict, param: str, body: Any,
                      expected: Mapping[str, str]) -> ApiError | None:
    """OpenAI's `invalid_type` 400 when `first` is one member's type mismatch of a union
    whose every member refused the value's type (pydantic reports one error per member,
    each under its member's tag: `input.str`, `input.list[...]`): "Invalid type for
    'input': expected a string or an array of input items, but got an object instead."
    (`expected[param]`: only for the fields the model names, the others keep pydantic's
    message for the first member, `invalid_value`, under the field's own name); None otherwise."""
    if param not in expected or not first["type"].endswith("_type"):
        return None
    members = [e for e in errors if len(e["loc"]) == len(first["loc"]) and e["type"].endswith("_type")
               and param_path(tuple(e["loc"]), body) == param]
    if len(members) < 2:
        return None
    return ApiError(400, f"Invalid type for '{param}': expected {expected[param]}, but got "
                    f"{_value_noun(first.get('input'))} instead.", "invalid_request_error", "invalid_type", param)


def openai_validation_error(errors: list, body: Any, expected: Mapping[str, str] | None = None) -> ApiError:
    """The 400 for pydantic's `errors` (`ValidationError.errors(include_url=False)`) of `body`;
    `expected`: per param, the types a union field takes as its messages say them
    ("a string or an array of input items"), for the fields the model names."""
    first = most_telling(errors)
    param = param_path(tuple(first["loc"]), body, is_missing=first["type"] == "missing") or None
    if first["type"] in OWN_CODES:
        return ApiError(400, first["msg"], "invalid_request_error", first["type"], param)
    union = _union_type_error(errors, first, param, body, expected or {}) if param else None
    if union is not None:
        return union
    bound = _openai_bound(first, param) if param else None
    if bound is not None:
        return ApiError(400, bound[1], "invalid_request_error", bound[0], param)
    message = first["msg"].removeprefix("Value error, ")
    where = f" at '{param}'" if param else ""
    return ApiError(400, f"Invalid request{where}: {message}", "invalid_request_error",
                    "invalid_value" if first["type"] != "missing" else "missing_required_parameter", param)
