"""Why no value meets a JSON Schema node by its own keywords (what `local_schemas` refuses
with a 400 naming the place, instead of asking a model for the impossible).

A node is empty when: its `enum` is empty; a required property has the schema `false`,
or is not in `properties` while `additionalProperties` is false (and no
`patternProperties` could take it); its `type` is only "array" with `items: false` and a
`minItems`; its `const`, or every `enum` member, fails its own type, number bounds or
string lengths; or every type it allows is ruled out by its bounds (`minimum` above
`maximum`, no integer or no multiple of `multipleOf` between them, `minLength` above
`maxLength` or every match of `pattern` longer than `maxLength`, `minItems` above
`maxItems`, `minProperties` above `maxProperties`).

Invariant: a node for which `why_nothing_fits` returns a reason has no valid value (each
rule errs toward None: a schema some value meets is never refused).
"""
from __future__ import annotations

import math
import re
from re import _parser as sre_parse

from gateway.json_bounds import MULTIPLE_TOLERANCE, number_range, string_lengths
from gateway.json_fitting import fits_own_keywords
from gateway.json_schemas import kinds_of

# keywords `_why_kind_empty` reads: a node with none of them allows some value of each type
BOUND_KEYWORDS = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength",
                            "maxLength", "minItems", "maxItems", "minProperties", "maxProperties"})


def why_nothing_fits(node: dict) -> str | None:
    """Why no value meets `node` by its own keywords, or None when some may."""
    if node.get("enum") == []:
        return "'enum' is empty"
    reason = _why_no_object_fits(node) or _why_no_array_fits(node) or _why_no_listed_value_fits(node)
    if reason is not None:
        return reason
    if BOUND_KEYWORDS.isdisjoint(node):
        return None
    reasons = [_why_kind_empty(node, kind) for kind in sorted(kinds_of(node))]
    if reasons and all(reasons):
        return "; ".join(dict.fromkeys(reasons))
    return None


def _only_kind(node: dict, kind: str) -> bool:
    """Whether `node` says it allows only `kind` (its own `type`: a keyword like `items`
    alone lets values of other types through)."""
    return node.get("type") in (kind, [kind]) and "$ref" not in node


def _why_no_object_fits(node: dict) -> str | None:
    required = node.get("required")
    if not isinstance(required, list) or not _only_kind(node, "object"):   # a non-object meets `required`
        return None
    properties = node.get("properties") if isinstance(node.get("properties"), dict) else {}
    forbidden = next((name for name in required if properties.get(name) is False), None)
    if forbidden is not None:
        return f"the required property '{forbidden}' has the schema false"
    if node.get("additionalProperties") is False and "patternProperties" not in node:
        missing = next((name for name in required if isinstance(name, str) and name not in properties), None)
        if missing is not None:
            return f"the required property '{missing}' is not in 'properties' and 'additionalProperties' is false"
    return None


def _why_no_array_fits(node: dict) -> str | None:
    """`items: false` bars the items after `prefixItems` (Draft 2020-12; all items without
    it): more `minItems` than `prefixItems` can hold is unmet (QA139: a tuple schema of two
    prefix items with `items: false` and `minItems: 2` was refused)."""
    least = _counts(node, "minItems", "maxItems")[0]
    prefix = node.get("prefixItems")
    num_prefix = len(prefix) if isinstance(prefix, list) else 0
    if node.get("items") is False and least > num_prefix and _only_kind(node, "array"):
        return (f"'items' is false and 'minItems' is {least}" if not num_prefix
                else f"'items' is false after {num_prefix} 'prefixItems' and 'minItems' is {least}")
    return None


def _why_no_listed_value_fits(node: dict) -> str | None:
    """Why no `const`/`enum` member meets the node's type, bounds and lengths."""
    if "$ref" in node:
        return None
    if "const" in node:
        return "'const' does not meet the schema's other keywords" if _breaks(node["const"], node) else None
    members = node.get("enum")
    if isinstance(members, list) and members and all(_breaks(member, node) for member in members):
        return "no member of 'enum' meets the schema's other keywords"
    return None


# the keywords a listed value is held to here: its node's type, number bounds and lengths
_OWN_BOUNDS = ("type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minLength",
               "maxLength")


def _breaks(value: object, node: dict) -> bool:
    """Whether `value` fails the node's `type`, number bounds or string lengths."""
    return not fits_own_keywords(value, {key: node[key] for key in _OWN_BOUNDS if key in node})


def _why_kind_empty(node: dict, kind: str) -> str | None:
    if kind in ("number", "integer"):
        if kind == "integer" and "number" in kinds_of(node):
            return None   # the number range decides
        return _empty_range(node, integer=kind == "integer")
    if kind == "string":
        return _above(node, "minLength", "maxLength", string_lengths(node)) or _pattern_too_long(node)
    if kind == "array":
        return _above(node, "minItems", "maxItems", _counts(node, "minItems", "maxItems"))
    if kind == "object":
        return _above(node, "minProperties", "maxProperties", _counts(node, "minProperties", "maxProperties"))
    return None


def _counts(node: dict, least_key: str, most_key: str) -> tuple[int, int | None]:
    least, most = node.get(least_key), node.get(most_key)
    return (least if isinstance(least, int) and not isinstance(least, bool) else 0,
            most if isinstance(most, int) and not isinstance(most, bool) else None)


def _above(node: dict, least_key: str, most_key: str, counts: tuple[int, int | None]) -> str | None:
    least, most = counts
    return None if most is None or least <= most else f"'{least_key}' ({least}) is above '{most_key}' ({most})"


def _empty_range(node: dict, integer: bool) -> str | None:
    low, low_open, high, high_open = number_range(node)
    if low is None or high is None:
        return None
    if integer:
        least = math.floor(low) + 1 if low_open else math.ceil(low)
        if least > (math.ceil(high) - 1 if high_open else math.floor(high)):
            return f"no integer lies between the bounds {low} and {high}"
        return _no_multiple(node, low, high)
    if low > high or low == high and (low_open or high_open):
        return f"the lower bound {low} is not below the upper bound {high}"
    return _no_multiple(node, low, high)


def _no_multiple(node: dict, low: float, high: float) -> str | None:
    """Why no multiple of `multipleOf` lies in [low, high] (exclusive bounds taken as
    inclusive: that only ever finds room, never refuses a schema some value meets)."""
    step = node.get("multipleOf")
    if not isinstance(step, (int, float)) or isinstance(step, bool) or step <= 0:
        return None
    try:
        lowest, highest = low / step, high / step
        slack = MULTIPLE_TOLERANCE * max(1.0, abs(lowest), abs(highest))   # 0.3 / 0.1 is 2.9999999999999996
        if math.floor(highest + slack) < math.ceil(lowest - slack):
            return f"no multiple of {step} lies between the bounds {low} and {high}"
    except (OverflowError, ValueError):   # a quotient past float's range: no verdict
        return None
    return None


def _pattern_too_long(node: dict) -> str | None:
    """Why no string meets both `pattern` and `maxLength`: every match of the pattern is
    longer (a string holding a match is at least that long, anchored or not)."""
    pattern, longest = node.get("pattern"), string_lengths(node)[1]
    if not isinstance(pattern, str) or longest is None:
        return None
    try:
        least = sre_parse.parse(pattern).getwidth()[0]
    except (re.error, RecursionError, OverflowError):   # refused elsewhere, or past what can be told
        return None
    return f"every string 'pattern' matches is longer than 'maxLength' ({longest})" if least > longest else None
