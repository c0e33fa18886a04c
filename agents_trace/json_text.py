"""JSON from clients, bounded in how deeply it nests, and standard (`loads_standard`).

Python's JSON codec and every recursive walk after it (schema checks, re-encoding) run
out of stack on arrays or objects nested about a thousand deep, well before a body
size limit can stop them. Invariant: a value that passed `json_depth(v) <= MAX_JSON_DEPTH`
or came out of `loads_bounded` can be walked recursively anywhere in the gateway.
"""
from __future__ import annotations

import json
import math
from typing import Any

MAX_JSON_DEPTH = 64  # real agent requests nest under 20 levels; tool schemas under 32 levels each


def json_depth(value: Any, limit: int = MAX_JSON_DEPTH) -> int:
    """How many arrays and objects `value` nests (a scalar is 0, `[]` is 1), counted level
    by level without recursion; stops early and returns `limit + 1` once deeper than
    `limit`. NOTE: on every request's body, so it touches only containers' children
    (about 25 us for a 90-message agent request)."""
    depth = 0
    level = [value] if type(value) is dict or type(value) is list else []
    while level:
        depth += 1
        if depth > limit:
            return limit + 1
        below = []
        for node in level:
            for child in (node.values() if type(node) is dict else node):
                kind = type(child)
                if kind is dict or kind is list:
                    below.append(child)
        level = below
    return depth


def loads_bounded(text: str, limit: int = MAX_JSON_DEPTH) -> Any:
    """`json.loads(text)`, raising ValueError when it is not JSON or nests deeper than `limit`."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise ValueError(f"JSON nested more than {limit} levels deep") from None
    if json_depth(value, limit) > limit:
        raise ValueError(f"JSON nested more than {limit} levels deep")
    return value


def loads_standard(raw: str | bytes) -> Any:
    """`json.loads(raw)` refusing (ValueError) what Python's reader takes and JSON does
    not: `NaN`, `Infinity`, `-Infinity`, and a number past a 64-bit float (`1e999`, read
    as infinity). Stored in a client's object, such a value made every later read of it
    fail (no JSON reply can hold it)."""
    return json.loads(raw, parse_float=_finite_float, parse_constant=_not_json)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:24]} is too large for a 64-bit float.")
    return value


def _not_json(name: str) -> float:
    raise ValueError(f"'{name}' is not a JSON value (JSON has no NaN or Infinity).")


def may_hold_surrogates(raw: bytes) -> bool:
    """False only when no string parsed from `raw` can hold a surrogate: they come from
    `\\udXXX` escapes, from UTF-8 lead byte 0xED (json.loads decodes with surrogatepass),
    or from a UTF-16/32 body (NUL bytes). Most bodies have none of these and skip the walk
    of `has_lone_surrogate`."""
    return b"\\ud" in raw or b"\\uD" in raw or b"\xed" in raw or b"\x00" in raw


def has_lone_surrogate(value: Any) -> bool:
    """Whether any string or key in `value` holds a UTF-16 surrogate that JSON's `\\ud800`
    escapes let through unpaired: such a string has no UTF-8 form, so tokenizers, error
    messages and stores all fail on it. Walks without recursion."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            if not node.isascii():
                try:
                    node.encode("utf-8")
                except UnicodeEncodeError:
                    return True
        elif isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False
