"""A client's JSON Schemas (a reply's `response_format`, each tool's parameters) as local
models write to them, checked before any work is queued.

JSON Schema allows a boolean wherever a schema goes: `true` takes any value, `false` none.
The reader (`json_prefix`) and the filler (`json_filling`) walk objects, so each boolean
subschema is rewritten: `true` as `{}`; a `false` property is dropped from `properties`
(so the key is never written; where the object takes unnamed keys, `propertyNames` then
keeps it out); `false` items as `maxItems: 0`; a `false` `anyOf`/`oneOf` branch is
dropped; elsewhere `false` is `{"not": {}}` (a keyword the reader does not steer, so the
reply is checked by jsonschema whole). The rewrite takes exactly the values the original
takes.

A schema some part of which no value can meet is a 400 naming its parameter and the
place (`json_unmet.why_nothing_fits` says why: a required property whose schema is
`false`, an empty `enum`, a subschema whose every allowed type is ruled out by its own
bounds, ...). Without it the model would be asked for the impossible and the reply would
break the schema without a word. So is a string part whose `minLength` is over
MAX_MIN_LENGTH (the filler would pad it on the event loop, whatever `max_tokens`), a `$ref`
that does not resolve within the schema (`json_schemas.unresolvable_ref`), and a
recursive one no finite value meets (`json_heights.Heights`: pydantic's `next: "Node"`,
required and not nullable), which no reply could close, a part whose smallest value
nests deeper than MAX_SMALLEST_HEIGHT levels (a chain of required `$defs`), which the
filler would not write whole, and one whose smallest value holds more than
MAX_FILLED_VALUES values (`json_smallest.num_values_inside`: a huge `minItems`), which
the filler would refuse only once it had written (and streamed) that many, or more than
MAX_SMALLEST_CHARS characters (`schema_limits.num_chars_inside`: many long `minLength`s).
Before all these, a schema past OpenAI's Structured Outputs size limits (properties, enum
values, names' and values' characters, `$ref` chains; `schema_limits.check_size`)
is a 400 `unsupported_parameter`, and a `$ref` cycle that ends nowhere a 400 with `code`:
the checks above and the reader and filler after them walk the schema on the event loop.

Invariant: `local_schema` returns `schema` itself when it holds no boolean subschema
(agents send the same tools every step: nothing is copied for them), else a rewritten
copy; the client's object is never changed.
"""
from __future__ import annotations

import copy
import math

from gateway.errors import invalid_request
from gateway.json_bounds import string_lengths
from gateway.json_heights import MAX_SMALLEST_HEIGHT, Heights
from gateway.json_schemas import SchemaRoot, unresolvable_ref, value_kind
from gateway.json_smallest import MAX_FILLED_VALUES, SchemaTooLarge, num_values_inside
from gateway.json_unmet import why_nothing_fits
from gateway.schema_limits import SchemaPastLimit, check_size
from gateway.smallest_chars import MAX_SMALLEST_CHARS, num_chars_inside

# keywords whose value is one subschema, a list of them, or a mapping of names to them
ONE_SCHEMA = ("additionalProperties", "items", "contains", "not", "if", "then", "else", "propertyNames",
              "additionalItems", "unevaluatedItems", "unevaluatedProperties")
SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
KEEPS_BOOLEAN = frozenset({"additionalProperties", "additionalItems", "unevaluatedItems", "unevaluatedProperties"})
NOTHING = {"not": {}}   # the schema no value meets, as an object
# the longest `minLength` written: the filler pads a string the model left short, on the
# event loop and whatever `max_tokens` says (QA62: 1e8 stalled every tenant ~30 s, 100 MB replies)
MAX_MIN_LENGTH = 100_000


def local_schema(schema: dict, param: str, code: str | None = "invalid_request") -> dict:
    """`schema` as the reader and filler take it (see the module docstring); a 400 naming
    `param` (with `code`) when part of it cannot be met or a `$ref` does not resolve (and
    `invalid_value` when its smallest value is too large to write)."""
    try:
        check_size(schema)
    except SchemaPastLimit as past:
        raise past.refusal(param, code) from None
    try:
        has_boolean = _check(schema)
    except _Unmet as unmet:
        place = f"at '{'.'.join(reversed(unmet.place))}'" if unmet.place else "at its root"
        raise invalid_request(f"Invalid JSON Schema: no value can meet it {place}: {unmet.reason}.", param=param,
                              code=code) from None
    except _TooLong as too_long:
        place = f"at '{'.'.join(reversed(too_long.place))}'" if too_long.place else "at its root"
        raise invalid_request(f"The JSON Schema's 'minLength' {place} is {too_long.least:,}: local models write "
                              f"strings of at most {MAX_MIN_LENGTH:,} characters where the schema requires "
                              "them.", param=param, code="unsupported_parameter") from None
    usable = _rewritten(copy.deepcopy(schema)) if has_boolean else schema
    ref = unresolvable_ref(usable)
    if ref is not None:
        raise invalid_request(f"The JSON Schema's reference '{ref}' does not resolve within it: local "
                              "models support only local references ('#/$defs/...').", param=param,
                              code="unsupported_parameter")
    heights = Heights(SchemaRoot(usable))
    too_high = heights.too_high()
    if too_high is not None:
        place = f"at '{too_high[0]}'" if too_high[0] else "at its root"
        if too_high[1] == math.inf:
            raise invalid_request(f"Invalid JSON Schema: no finite value can meet it {place}: each value there must "
                                  "hold another like it (a required property or item that refers back to it, with "
                                  "no null or other branch to end on).", param=param, code=code)
        raise invalid_request(f"The JSON Schema's smallest value {place} nests {too_high[1]:.0f} levels deep: local "
                              f"models write values nested at most {MAX_SMALLEST_HEIGHT} deep.", param=param,
                              code="unsupported_parameter")
    num_values = num_values_inside(usable, heights)
    if num_values is not None and num_values > MAX_FILLED_VALUES:
        raise SchemaTooLarge.of(usable).named(param)
    num_chars = num_chars_inside(usable, heights)
    if num_chars is not None and num_chars > MAX_SMALLEST_CHARS:
        raise invalid_request(f"The JSON Schema's smallest valid value is too large to write (over "
                              f"{MAX_SMALLEST_CHARS:,} characters: strings whose `minLength`s, times the items "
                              "and properties that hold them, add up past it).", param=param, code="invalid_value")
    return usable


SUBSCHEMA_KEYWORDS = frozenset(ONE_SCHEMA + SCHEMA_LISTS + SCHEMA_MAPS)

def _subschemas(node: dict):
    """(keyword, key or index or None, subschema) for each subschema directly in `node`."""
    for keyword, value in node.items():
        if keyword not in SUBSCHEMA_KEYWORDS:
            continue
        if keyword in SCHEMA_MAPS:
            if isinstance(value, dict):
                for name, child in value.items():
                    yield keyword, name, child
        elif isinstance(value, list):
            if keyword in SCHEMA_LISTS or keyword == "items":
                for index, child in enumerate(value):
                    yield keyword, index, child
        elif keyword in ONE_SCHEMA:
            yield keyword, None, value


class _Unmet(Exception):
    """No value meets a part of the schema: why, and where (its keywords, innermost first)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason, self.place = reason, []


class _TooLong(Exception):
    """A part of the schema requires a string longer than MAX_MIN_LENGTH, and where."""

    def __init__(self, least: int) -> None:
        super().__init__(least)
        self.least, self.place = least, []


def _check(node: object) -> bool:
    """Raise `_Unmet` for the first part of `node` no value meets; whether it holds a
    boolean subschema (where the rewrite has work)."""
    if isinstance(node, bool):
        return True
    if not isinstance(node, dict):
        return False
    reason = why_nothing_fits(node)
    if reason is not None:
        raise _Unmet(reason)
    least = string_lengths(node)[0]
    if least > MAX_MIN_LENGTH and value_kind(node) == "string":
        raise _TooLong(least)
    has_boolean = False
    for keyword, key, child in _subschemas(node):
        if keyword in KEEPS_BOOLEAN and isinstance(child, bool):
            continue
        try:
            has_boolean = _check(child) or has_boolean
        except (_Unmet, _TooLong) as unmet:   # the place is spelled out only for the error
            unmet.place.append(keyword + ("" if key is None else f"[{key}]" if isinstance(key, int) else f".{key}"))
            raise
    return has_boolean


def _rewritten(node: object) -> object:
    """`node` (a copy, changed in place) with its boolean subschemas rewritten."""
    if node is True:
        return {}
    if node is False:
        return dict(NOTHING)
    if not isinstance(node, dict):
        return node
    properties = node.get("properties")
    if isinstance(properties, dict):
        dropped = [name for name, child in properties.items() if child is False]
        for name in dropped:
            del properties[name]
        if dropped and node.get("additionalProperties", True) is not False:
            kept_out = {"propertyNames": {"not": {"enum": dropped}}}
            node.setdefault("allOf", []).append(kept_out)
    if node.get("items") is False:
        del node["items"]
        node["maxItems"] = 0
    for keyword in ("anyOf", "oneOf"):
        if isinstance(node.get(keyword), list):
            node[keyword] = [branch for branch in node[keyword] if branch is not False] or [dict(NOTHING)]
    for keyword, key, child in list(_subschemas(node)):
        if keyword in KEEPS_BOOLEAN and isinstance(child, bool):
            continue
        if key is None:
            node[keyword] = _rewritten(child)
        else:
            node[keyword][key] = _rewritten(child)
    return node
