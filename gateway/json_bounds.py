"""A leaf value made to meet its schema's bounds and lengths: what pydantic writes for
`Field(ge=, gt=, le=, lt=, multiple_of=, min_length=, max_length=)`.

The reader (`json_prefix`) checks each number where it ends and each string's length as
it streams (`number_fits`, `string_lengths`); the filler (`json_filling`) asks the model
for each value it writes: a number outside its bounds is clamped into them, a string too
long is cut and one too short padded, and a fallback value is picked inside the bounds
rather than at zero.

Invariant: `number_in_bounds` returns a number that validates against the schema's
`minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum` (both the number form and
draft 4's boolean form) and, where one exists in range, `multipleOf`, whenever the
bounds leave room for one; `string_in_bounds` returns a string within
`minLength`/`maxLength` (counted in code points, as JSON Schema counts); `number_fits` is
jsonschema's own verdict on the bounds, and pydantic's on `multipleOf` (`is_multiple`: a
float within a hair of a multiple is one, where Python's jsonschema rounds 19.99 out of
`multipleOf: 0.01`).
"""
from __future__ import annotations

import json
import math

PAD = "-"   # what pads a string the model left shorter than `minLength`


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _bound(schema: dict, inclusive_key: str, exclusive_key: str) -> tuple[float | None, bool]:
    """(the bound, whether it is exclusive); (None, False) when there is none."""
    inclusive, exclusive = schema.get(inclusive_key), schema.get(exclusive_key)
    if _is_number(exclusive):
        if _is_number(inclusive):
            tighter = exclusive >= inclusive if inclusive_key == "minimum" else exclusive <= inclusive
            return (exclusive, True) if tighter else (inclusive, False)
        return exclusive, True
    if _is_number(inclusive):
        return inclusive, exclusive is True   # draft 4: `exclusiveMinimum: true` beside `minimum`
    return None, False


def number_range(schema: dict) -> tuple[float | None, bool, float | None, bool]:
    """(lower bound, whether exclusive, upper bound, whether exclusive) of a number
    schema; a bound it does not set is (None, False)."""
    return (*_bound(schema, "minimum", "exclusiveMinimum"), *_bound(schema, "maximum", "exclusiveMaximum"))


def _step(schema: dict) -> float | None:
    """The schema's `multipleOf`, when it sets a usable one."""
    step = schema.get("multipleOf")
    return step if _is_number(step) and step > 0 else None


# how far from a whole number a float quotient may be and still count (pydantic's test
# allows 1e-8): 19.99 / 0.01 is 1998.9999999999998 in floats
MULTIPLE_TOLERANCE = 1e-9


def is_multiple(value: float, step: float) -> bool:
    """Whether `value` is a multiple of `step`: exactly for integers; for floats, as pydantic
    tests it, within MULTIPLE_TOLERANCE of a whole quotient (Python's jsonschema tests
    `int(q) == q` and so calls 19.99 no multiple of 0.01, which a price field then lost)."""
    if isinstance(step, float) or isinstance(value, float):
        quotient = value / step
        try:
            return abs(quotient - round(quotient)) <= MULTIPLE_TOLERANCE * max(1.0, abs(quotient))
        except (OverflowError, ValueError):   # an infinite or undefined quotient
            return False
    return value % step == 0


def number_in_bounds(value: float, schema: dict, integer: bool) -> int | float:
    """`value` moved into the schema's bounds (the nearest value inside), then to a
    nearby `multipleOf` inside them when one is found; an integer when `integer`."""
    low, low_open, high, high_open = number_range(schema)
    if integer:
        low = None if low is None else math.floor(low) + 1 if low_open else math.ceil(low)
        high = None if high is None else math.ceil(high) - 1 if high_open else math.floor(high)
        low_open = high_open = False
        value = round(value)
    if low is not None and (value < low or low_open and value <= low):
        value = low if not low_open else low + 1 if high is None or low + 1 < high else (low + high) / 2
    if high is not None and (value > high or high_open and value >= high):
        value = high if not high_open else high - 1 if low is None or high - 1 > low else (low + high) / 2
    step = _step(schema)
    if step is not None and not is_multiple(value, step):
        try:
            nearest = round(value / step)
        except OverflowError:   # a step so small the quotient passes float's range: no multiple to find
            return int(value) if integer else value
        for k in sorted(range(nearest - 2, nearest + 3), key=lambda k: abs(k * step - value)):
            candidate = k * step
            if integer:
                candidate = int(round(candidate))
            elif isinstance(step, float):
                candidate = round(candidate, 12)
            if number_fits(candidate, schema):
                value = candidate
                break
    return int(value) if integer else value


def number_fits(value: int | float, schema: dict) -> bool:
    """Whether `value` meets the schema's bounds and `multipleOf` (as jsonschema checks)."""
    low, low_open, high, high_open = number_range(schema)
    if low is not None and (value < low or low_open and value == low):
        return False
    if high is not None and (value > high or high_open and value == high):
        return False
    step = _step(schema)
    return step is None or is_multiple(value, step)


NUMBER_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")


def number_text_fits(text: str, schema: dict) -> bool:
    """`number_fits` for a whole JSON number as written; False for one Python will not
    read (over 4,300 digits)."""
    if not any(key in schema for key in NUMBER_BOUNDS):
        return True
    try:
        return number_fits(json.loads(text), schema)
    except ValueError:
        return False


def _whole(value: object) -> int | None:
    """A length keyword's value as an int: an integer, or a float with nothing after the
    point (`2.0`, which JSON Schema and jsonschema take as 2); None for anything else."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def string_lengths(schema: dict) -> tuple[int, int | None]:
    """(`minLength`, `maxLength`) of a string schema: (0, None) where it sets neither."""
    shortest = _whole(schema.get("minLength"))
    return (0 if shortest is None else shortest, _whole(schema.get("maxLength")))


def string_in_bounds(text: str, schema: dict, written: int = 0) -> str:
    """`text` cut to `maxLength`, then padded to `minLength`, after `written` characters
    of the same string already sent."""
    shortest, longest = string_lengths(schema)
    if longest is not None and written + len(text) > longest:
        text = text[:max(0, longest - written)]
    if written + len(text) < shortest:
        text += PAD * (shortest - written - len(text))
    return text
