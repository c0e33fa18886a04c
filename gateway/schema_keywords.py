"""Which keywords of a reply's JSON schema the reader (`json_prefix`) does not decide as
the text streams, and which `strict: true` refuses.

`is_steerable(schema)` says whether every constraint in the schema is one the reader
decides exactly as the text streams; only then is a reply streamed as it is written.
`strict_refusal(schema)` names the keyword a `strict: true` schema is refused for.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator

from gateway.json_patterns import usable_pattern
from gateway.json_schemas import ALL_KINDS, SchemaRoot

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
