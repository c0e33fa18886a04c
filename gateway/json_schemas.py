"""What a reply's JSON schema allows, as the reader (`json_prefix`) and the filler
(`json_filling`) ask it: local `$ref`s resolved, the `anyOf`/`oneOf` branch a value's
first character picks, enum and const values serialized, member and item schemas (how
deep the smallest value of each part is: json_heights.py).

Which keywords the reader does not decide, and which `strict: true` refuses, is
schema_keywords.py.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from gateway.json_first_chars import first_chars_of
from gateway.json_fitting import OwnKeywords
from gateway.json_patterns import HeldPattern, usable_pattern

ALL_KINDS = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})
FIRST_CHARS = {"object": "{", "array": "[", "string": '"', "number": "-0123456789",
               "integer": "-0123456789", "boolean": "tf", "null": "n"}
MAX_ITEMS = 1 << 30


def kinds_of(schema: dict) -> frozenset[str]:
    """The JSON types a (resolved) schema allows; a schema without `type` allows what its
    keywords imply (`properties`: object, `items`: array), else any."""
    kind = schema.get("type")
    if isinstance(kind, str):
        kinds = frozenset({kind})
    elif isinstance(kind, list):
        kinds = frozenset(kind)
    elif "properties" in schema:
        kinds = frozenset({"object"})
    elif "items" in schema:
        kinds = frozenset({"array"})
    else:
        return ALL_KINDS
    return kinds


def value_kind(schema: dict) -> str:
    """The one JSON type the filler writes for `schema` (the first that is not null)."""
    kind = schema.get("type")
    if kind is None:
        return "object" if "properties" in schema else "array" if "items" in schema else "string"
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    return kind


def listed_values(schema: dict) -> list | None:
    """The values a schema lists: its `const`, or the members of its `enum` that meet its
    other keywords (`enum [1, 2, 50]` with `minimum: 10` takes 50 alone; every member where
    none does, a schema `local_schemas` refuses); None when it lists none."""
    if "const" in schema:
        return [schema["const"]]
    if not isinstance(schema.get("enum"), list):
        return None
    own = OwnKeywords(schema)   # the enum's members as a set: linear, not quadratic (QA134 H2)
    return [member for member in schema["enum"] if own.fits(member)] or schema["enum"]


class SchemaRoot:
    """A schema document: `$ref`s resolve against it.

    Invariant: what it works out for a part (its resolved view, its listed values and their
    JSON text, its first characters, its held pattern) is found once per part and kept (by
    the part's id, the part kept alive with it) for the document's life, one request's: a
    part that many paths reach (an `anyOf` whose branches are the same `$ref`, nested D
    deep: 2^D paths) or a large `enum` asked about at each value costs once, not per path
    or per ask (QA134 H1, H2, H5). Nothing is kept between documents."""

    def __init__(self, document: dict) -> None:
        self.document = document
        self._kept: dict[tuple[str, int], tuple[dict, Any]] = {}   # (what, id(part)) -> (part, its value)

    def _once(self, what: str, schema: dict, work: Callable[[dict], Any]) -> Any:
        """`work(schema)`, worked out at the first ask for this part and kept."""
        kept = self._kept.get((what, id(schema)))
        if kept is None or kept[0] is not schema:
            kept = self._kept[what, id(schema)] = (schema, work(schema))
        return kept[1]

    def resolve(self, schema: dict) -> dict:
        """The part a `$ref` points to (a chain of them, 16 hops at most), with the `$ref`'s
        sibling keywords over it; the same dict at each ask; `schema` itself without one
        (or where it does not resolve)."""
        if not isinstance(schema.get("$ref"), str):
            return schema
        return self._once("resolve", schema, self._resolved)

    def _resolved(self, schema: dict, depth: int = 0) -> dict:
        ref = schema.get("$ref")
        if not isinstance(ref, str) or depth > 16:
            return schema
        target = self._lookup(ref)
        if target is None:
            return schema
        rest = {k: v for k, v in schema.items() if k != "$ref"}
        return self._resolved({**target, **rest} if rest else target, depth + 1)

    def _lookup(self, ref: str) -> dict | None:
        if not ref.startswith("#"):
            return None
        node: object = self.document
        for part in [p for p in ref[1:].split("/") if p]:
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, dict) or part not in node:
                return None
            node = node[part]
        return node if isinstance(node, dict) else None

    def branches(self, schema: dict) -> list[dict] | None:
        options = schema.get("anyOf", schema.get("oneOf"))
        if not isinstance(options, list):
            return None
        return [self.resolve(option) for option in options if isinstance(option, dict)]

    def branch(self, schema: dict, char: str) -> dict | None:
        """The schema a value starting with `char` is read under (an `anyOf`/`oneOf`
        branch chosen by it), or None when no branch starts so."""
        schema = self.resolve(schema)
        branches = self.branches(schema)
        if branches is None:
            return schema
        return next((b for b in branches if char in self.first_chars(b)), None)

    def first_chars(self, schema: dict) -> str:
        """The characters a value of `schema` (resolved) may start with, each once, in no
        set order: its listed values' first characters, else its branches' (through nested
        `anyOf`/`oneOf`; a branch leading back to an `anyOf` it is in adds nothing of its
        own), else its types' (FIRST_CHARS). Found for every part the walk reaches at once
        (`first_chars_of`), so each part is looked at once per document."""
        kept = self._kept.get(("first_chars", id(schema)))
        if kept is None or kept[0] is not schema:
            own = {id(part): (part, value) for part, value in first_chars_of(schema, self._first_step)}
            self._kept.update((("first_chars", key), kept) for key, kept in own.items())
            return own[id(schema)][1]
        return kept[1]

    def _first_step(self, schema: dict) -> tuple[str | None, list[dict]]:
        """`schema`'s own first characters and the parts whose first characters it adds,
        or (the kept first characters, []) for a part found already."""
        kept = self._kept.get(("first_chars", id(schema)))
        if kept is not None and kept[0] is schema:
            return kept[1], []
        options = self.options(schema)
        if options is not None:
            return "".join(option[:1] for option in options), []
        branches = self.branches(schema)
        if branches is not None:
            return "", branches
        return "".join(FIRST_CHARS[kind] for kind in kinds_of(schema) if kind in FIRST_CHARS), []

    def listed(self, schema: dict) -> list | None:
        """`listed_values(schema)`, found once per part."""
        return self._once("listed", schema, listed_values)

    def options(self, schema: dict) -> tuple[str, ...] | None:
        """`const` or `enum` values (`listed_values`) as JSON text, or None when the schema
        has neither."""
        return self._once("options", schema, self._serialized)

    def _serialized(self, schema: dict) -> tuple[str, ...] | None:
        values = self.listed(schema)
        return None if values is None else tuple(json.dumps(value, ensure_ascii=False) for value in values)

    def pattern(self, schema: dict) -> HeldPattern | None:
        """`usable_pattern(schema)`, compiled and spelled once per part."""
        return self._once("pattern", schema, usable_pattern)

    def member_schema(self, schema: dict, key: str) -> dict:
        return self.resolve(schema.get("properties", {}).get(key, {}))

    def item_schema(self, schema: dict) -> dict:
        items = schema.get("items")
        return self.resolve(items) if isinstance(items, dict) else {}

    def max_items(self, schema: dict) -> int:
        value = schema.get("maxItems")
        return int(value) if isinstance(value, int) else MAX_ITEMS


def is_closed(schema: dict) -> bool:
    """Whether an object takes only the keys its schema names. NOTE: stricter than JSON
    Schema, where unnamed keys are allowed unless `additionalProperties` is false: a schema
    that names properties takes others only with `additionalProperties: true` (a small
    model otherwise fills a tool's arguments with keys like "type" and "properties",
    copied from the schema in its prompt); one that names none takes any."""
    extra = schema.get("additionalProperties")
    return extra is False or (extra is not True and "properties" in schema)


def is_integer_only(schema: dict) -> bool:
    """Whether a value of `schema` must be an integer (no fraction or exponent is read)."""
    kinds = kinds_of(schema)
    return "integer" in kinds and "number" not in kinds


def unresolvable_ref(schema: dict) -> str | None:
    """The first `$ref` in `schema` that does not resolve within it (a remote one, or a
    pointer to nowhere), or None: local models check their replies against the schema
    alone."""
    root, nodes = SchemaRoot(schema), [schema]
    while nodes:
        node = nodes.pop()
        if isinstance(node, list):
            nodes.extend(node)
        elif isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and (not ref.startswith("#") or root._lookup(ref) is None):
                return ref
            nodes.extend(node.values())
    return None
