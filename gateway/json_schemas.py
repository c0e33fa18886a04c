"""What a reply's JSON schema allows, as the reader (`json_prefix`) and the filler
(`json_filling`) ask it: local `$ref`s resolved, the `anyOf`/`oneOf` branch a value's
first character picks, enum and const values serialized, member and item schemas (how
deep the smallest value of each part is: json_heights.py).

`is_steerable(schema)` says whether every constraint in the schema is one the reader
decides exactly as the text streams; only then is a reply streamed as it is written.
`strict_refusal(schema)` names the keyword a `strict: true` schema is refused for.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from gateway.json_first_chars import first_chars_of
from gateway.json_fitting import OwnKeywords
from gateway.json_patterns import HeldPattern, usable_pattern

ALL_KINDS = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})
FIRST_CHARS = {"object": "{", "array": "[", "string": '"', "number": "-0123456789",
               "integer": "-0123456789", "boolean": "tf", "null": "n"}
# Validation keywords the reader does not decide (the rest are steered, or annotations).
UNSTEERED = frozenset({
    "allOf", "not", "if", "then", "else", "patternProperties",
    "propertyNames", "dependentRequired", "dependentSchemas", "dependencies", "minProperties",
    "maxProperties", "uniqueItems", "contains", "minContains", "maxContains", "prefixItems",
    "additionalItems", "unevaluatedProperties", "unevaluatedItems", "$dynamicRef", "$recursiveRef"})
# What `strict: true` refuses (a 400): the keywords OpenAI's strict mode says it does not
# support (composition and conditionals) and tuples (`prefixItems`, `items` as a list, which
# it refuses too). The reader's other limits (`uniqueItems`: pydantic's `set[str]`, which an
# Agents SDK function tool sends strict; `minProperties`, a pattern it cannot spell, `anyOf`
# branches that start alike, a schema-valued `additionalProperties`) stay unsteered, as
# without `strict`: OpenAI's strict mode may take them, and refusing them would fail agents
# that run there.
STRICT_REFUSED = frozenset({"allOf", "not", "if", "then", "else", "dependentRequired", "dependentSchemas",
                            "dependencies", "prefixItems", "items", "additionalItems"})
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


def is_steerable(schema: dict) -> bool:
    """Whether the reader decides every constraint of `schema` as the text streams."""
    return isinstance(schema, dict) and next(unsteered_parts(schema), None) is None


def strict_refusal(schema: dict) -> tuple[str, str] | None:
    """(the keyword, its place: "properties.point.prefixItems") of the first keyword in
    `schema` (a valid one) that `strict: true` refuses (STRICT_REFUSED), or None. Only
    those keywords are looked for (`_refused_keywords`): a strict agent's tools come with
    every request, and the reader's other limits (a pattern compiled, `anyOf` branches'
    first characters) would cost ten times the walk."""
    return next((part for part in unsteered_parts(schema, _refused_keywords) if part[0] != "schema"), None)


def unsteered_parts(schema: object, keywords_of: Callable[["SchemaRoot", dict], Iterator[str]] | None = None
                    ) -> Iterator[tuple[str, str]]:
    """(keyword, place) for each keyword of each part of `schema` that the reader does not
    decide (`keywords_of`, by default `_unsteered_keywords`; "schema" for a part that is not an object) and where it
    is, as dotted keys from the root ("properties.a.items.not"; a part reached through a
    `$ref` is placed where the reference points: "$defs.P.allOf").

    Invariant: every part reachable from the root (local `$ref`s resolved) is checked
    once, from a list of parts to visit, never by recursion: a long chain of `$defs`
    cannot exhaust the stack; lazily, so a caller that stops at the first costs no more
    than the walk up to it. A part's parts are walked whatever it holds, so a keyword
    `strict` refuses is found below one it takes unenforced (QA223)."""
    keywords_of = keywords_of or _unsteered_keywords
    root = SchemaRoot(schema) if isinstance(schema, dict) else None
    seen: set[int] = set()
    to_visit: list[tuple[object, str]] = [(schema, "")]
    while to_visit:
        raw, place = to_visit.pop()
        if not isinstance(raw, dict) or root is None:
            yield "schema", place
            continue
        node = root.resolve(raw)
        if id(node) in seen:
            continue
        seen.add(id(node))
        node_place = place if node is raw else ".".join(
            p.replace("~1", "/").replace("~0", "~") for p in raw["$ref"][1:].split("/") if p)
        for keyword in keywords_of(root, node):
            yield keyword, _joined(place if keyword in raw else node_place, keyword)
        options = node.get("anyOf", node.get("oneOf"))
        if isinstance(options, list):
            name = "anyOf" if "anyOf" in node else "oneOf"
            to_visit.extend((o, _joined(node_place, f"{name}[{i}]")) for i, o in enumerate(options)
                            if isinstance(o, dict))
        members = node.get("properties")
        if isinstance(members, dict):
            to_visit.extend((member, _joined(node_place, f"properties.{key}")) for key, member in members.items())
        for part in ("items", "additionalProperties"):   # (a dict's values: pydantic's dict[str, X], QA223 F2)
            if isinstance(node.get(part), dict):
                to_visit.append((node[part], _joined(node_place, part)))


def _joined(place: str, part: str) -> str:
    return f"{place}.{part}" if place else part


def _refused_keywords(root: SchemaRoot, node: dict) -> Iterator[str]:
    """Each of `node`'s own keywords `strict: true` refuses (STRICT_REFUSED; `items` only
    as a list, a tuple), in the order they are written."""
    return (key for key in node if key in STRICT_REFUSED and (key != "items" or isinstance(node[key], list)))


def _unsteered_keywords(root: SchemaRoot, node: dict) -> Iterator[str]:
    """Each of `node`'s own keywords the reader does not decide (its parts are checked
    apart), in the order they are written, then the forms it cannot read."""
    yield from (key for key in node if key in UNSTEERED)
    if isinstance(node.get("items"), list):   # the tuple form of draft 7 (2020-12's `prefixItems`)
        yield "items"
    if "pattern" in node and usable_pattern(node) is None:   # one the reader cannot hold strings to
        yield "pattern"
    if not isinstance(node.get("additionalProperties", True), bool):
        yield "additionalProperties"
    if isinstance(node.get("$ref"), str):   # a reference that does not resolve here
        yield "$ref"
    kinds = node.get("type")
    if kinds is not None and not set([kinds] if isinstance(kinds, str) else kinds) <= ALL_KINDS:
        yield "type"
    branches = root.branches(node)
    if branches is not None:
        firsts = [set(root.first_chars(b)) for b in branches]
        if any(a & b for i, a in enumerate(firsts) for b in firsts[i + 1:]):
            yield "anyOf" if "anyOf" in node else "oneOf"
