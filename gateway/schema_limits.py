"""OpenAI's documented Structured Outputs limits on a JSON Schema's size, checked on a
local model's schema before anything else is done with it (`local_schemas.local_schema`):
the reader and the filler walk the schema on the event loop for every reply, so a schema
past them (QA134: a 4,000-value enum, 10,000 properties, an `anyOf` of 10,000 objects, a
10,000-hop `$ref` chain) stalled every tenant for seconds.

The limits: at most MAX_PROPERTIES object properties in all; at most MAX_ENUM_VALUES
`enum` values in all; at most MAX_NAME_AND_VALUE_CHARS characters of property names,
definition names, `enum` and `const` values together (a value that is not a string counts
as its JSON text); an `enum` of more than BIG_ENUM_VALUES values at most BIG_ENUM_CHARS
characters of strings; no `$ref` chain of more than MAX_REF_HOPS hops.

Nesting through references: a `$ref` is one level per hop, from the part that holds it to
its target, and on where the target is itself a `$ref`, or an `anyOf`/`oneOf`/`allOf` one
of whose parts is one (a chain `a -> b -> c` nests 3 levels): a chain of more than MAX_REF_HOPS
hops is refused (`SchemaRoot.resolve` gave up after 16 and read the part as any value, so
the reply broke the schema: QA134 M1), and so is one that comes back to where it started
(`a -> b -> a`, or `a = anyOf[a, null]`), which the reader and filler would follow for ever.
A reference whose target holds structure (a property or item referring to a definition:
pydantic's nested and recursive models) ends its chain there. NOTE: OpenAI also allows at
most 10 levels of nesting; the written nesting of a schema is not limited here (a forced
tool call with parameters 29 objects deep is served, tests/gateway/test_http_errors.py):
the body's JSON depth limit (64) already bounds it to about 30.

Invariant: `check_size` visits each part of the document once and each reference target
once (iteratively: a 10,000-hop chain cannot exhaust the stack), so it takes time linear in
the schema; it raises `SchemaPastLimit` for the first limit passed and changes nothing.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from gateway.errors import ApiError, invalid_request

MAX_PROPERTIES = 5_000
MAX_REF_HOPS = 10
MAX_ENUM_VALUES = 1_000
MAX_NAME_AND_VALUE_CHARS = 120_000
BIG_ENUM_VALUES = 250
BIG_ENUM_CHARS = 15_000

# keywords holding subschemas (one, a list, or a mapping of names to them)
SUBSCHEMA_KEYWORDS = frozenset({
    "properties", "patternProperties", "additionalProperties", "items", "prefixItems", "contains",
    "additionalItems", "unevaluatedItems", "unevaluatedProperties", "anyOf", "oneOf", "allOf", "not", "if",
    "then", "else", "propertyNames", "dependentSchemas", "$defs", "definitions"})
SCHEMA_MAPS = frozenset({"properties", "patternProperties", "dependentSchemas", "$defs", "definitions"})
DEFINITIONS = frozenset({"$defs", "definitions"})
# parts the reader, filler and validator follow without nesting (QA139: an `allOf` chain of the
# same `$ref` twice doubled a reply's validation per level, and an `allOf` that refers back to
# its own part sent the validator round it for ever: RecursionError)
BRANCHES = ("anyOf", "oneOf", "allOf")


@dataclass(slots=True)
class SchemaPastLimit(Exception):
    """A limit passed: `what` says which and by how much, `place` where (a dotted path of
    keywords from the root; "" for the schema as a whole), `endless` for a `$ref` cycle."""

    what: str
    place: str = ""
    endless: bool = False

    def refusal(self, param: str, code: str | None) -> ApiError:
        """The 400 naming `param`: `unsupported_parameter` for a limit passed, `code` (the
        caller's, as for a schema no value meets) for a cycle."""
        place = f" at '{self.place}'" if self.place else ""
        if self.endless:
            return invalid_request(f"Invalid JSON Schema: no value can meet it{place}: {self.what}.", param=param,
                                   code=code)
        return invalid_request(f"The JSON Schema is too large{place}: {self.what}.", param=param,
                               code="unsupported_parameter")


@dataclass(slots=True)
class _Place:
    """Where a part lies: its keyword step and its holder's place (built into a path only
    for an error)."""

    step: str
    holder: "_Place | None"

    def path(self) -> str:
        steps, place = [], self
        while place is not None:
            steps.append(place.step)
            place = place.holder
        return ".".join(reversed(steps))


def text_length(value: object) -> int:
    """The characters a listed value counts: a string's own, another value's JSON text."""
    if isinstance(value, str):
        return len(value)
    return len(json.dumps(value, ensure_ascii=False))


@dataclass(slots=True)
class SizeCheck:
    """One walk of `document`, adding up what the limits count."""

    document: dict
    num_properties: int = 0
    num_enum_values: int = 0
    num_chars: int = 0
    _hops: dict[int, int] = field(default_factory=dict)   # id(reference target) -> its hops on

    def run(self) -> None:
        parts: list[tuple[object, _Place | None]] = [(self.document, None)]
        while parts:
            node, place = parts.pop()
            if not isinstance(node, dict):
                continue
            self._count(node, place)
            ref = node.get("$ref")
            if isinstance(ref, str) and self._hops_from(ref, place) > MAX_REF_HOPS:
                raise _too_deep(place)
            children: list[tuple[object, _Place | None]] = []
            for keyword, value in node.items():
                if keyword not in SUBSCHEMA_KEYWORDS:
                    continue
                if isinstance(value, dict) and keyword in SCHEMA_MAPS:
                    children.extend((child, _Place(f"{keyword}.{name}", place)) for name, child in value.items())
                elif isinstance(value, dict):
                    children.append((value, _Place(keyword, place)))
                elif isinstance(value, list) and keyword not in SCHEMA_MAPS:
                    children.extend((child, _Place(f"{keyword}[{index}]", place)) for index, child in enumerate(value))
            parts.extend(reversed(children))   # visited in the document's order: the first place passed is named

    def _count(self, node: dict, place: _Place | None) -> None:
        properties = node.get("properties")
        if isinstance(properties, dict):
            self.num_properties += len(properties)
            self._add_chars(sum(len(name) for name in properties), place)
            if self.num_properties > MAX_PROPERTIES:
                raise SchemaPastLimit(f"it has more than {MAX_PROPERTIES:,} object properties in all")
        for keyword in DEFINITIONS:
            if isinstance(node.get(keyword), dict):
                self._add_chars(sum(len(name) for name in node[keyword]), place)
        enum = node.get("enum")
        if isinstance(enum, list):
            self.num_enum_values += len(enum)
            if self.num_enum_values > MAX_ENUM_VALUES:
                raise SchemaPastLimit(f"it has more than {MAX_ENUM_VALUES:,} enum values in all", _path(place))
            self._add_chars(sum(text_length(member) for member in enum), place)
            if len(enum) > BIG_ENUM_VALUES:
                string_chars = sum(len(member) for member in enum if isinstance(member, str))
                if string_chars > BIG_ENUM_CHARS:
                    raise SchemaPastLimit(f"its enum of {len(enum):,} values has {string_chars:,} characters of "
                                          f"strings (at most {BIG_ENUM_CHARS:,} in an enum of more than "
                                          f"{BIG_ENUM_VALUES} values)", _path(place))
        if "const" in node:
            self._add_chars(text_length(node["const"]), place)

    def _add_chars(self, chars: int, place: _Place | None) -> None:
        self.num_chars += chars
        if self.num_chars > MAX_NAME_AND_VALUE_CHARS:
            raise SchemaPastLimit(f"its property names, definition names, enum and const values have more than "
                                  f"{MAX_NAME_AND_VALUE_CHARS:,} characters in all", _path(place))

    def _hops_from(self, ref: str, place: _Place | None) -> int:
        """The hops of a `$ref`'s chain: one to its target, and the longest chain of
        references on from there (`_hops_on`); an unresolvable one is one hop (refused later)."""
        target = _target(self.document, ref)
        return 1 + (0 if target is None else self._hops_on(target, MAX_REF_HOPS - 1, place))

    def _hops_on(self, start: dict, room: int, place: _Place | None) -> int:
        """The longest chain of reference hops from `start` without nesting (its own `$ref`,
        its `anyOf`/`oneOf`/`allOf` parts' ones), each target worked out once; a chain that
        comes back to a part on it is refused, and one longer than `room` at once."""
        on_chain: set[int] = set()
        stack: list[tuple[dict, list[dict]]] = [(start, self._next_targets(start))]
        on_chain.add(id(start))
        while stack:
            node, pending = stack[-1]
            if id(node) in self._hops:   # worked out before this walk reached it
                stack.pop()
                on_chain.discard(id(node))
                continue
            while pending and id(pending[-1]) in self._hops:
                pending.pop()
            if pending:
                target = pending.pop()
                if id(target) in on_chain:
                    raise SchemaPastLimit("its `$ref`s lead back to where they started (a cycle of references "
                                          "that ends nowhere)", _path(place), endless=True)
                if len(stack) > room:
                    raise _too_deep(place)
                on_chain.add(id(target))
                stack.append((target, self._next_targets(target)))
                continue
            self._hops[id(node)] = max((1 + self._hops[id(target)] for target in self._next_targets(node)),
                                       default=0)
            stack.pop()
            on_chain.discard(id(node))
        return self._hops[id(start)]

    def _next_targets(self, node: dict) -> list[dict]:
        """The targets of the references `node` stands for without nesting: its own
        `$ref`'s, and those of its `anyOf`/`oneOf`/`allOf` parts (through nested ones)."""
        targets, nodes = [], [node]
        while nodes:
            part = nodes.pop()
            ref = part.get("$ref")
            if isinstance(ref, str):
                target = _target(self.document, ref)
                if target is not None:
                    targets.append(target)
            for keyword in BRANCHES:
                if isinstance(part.get(keyword), list):
                    nodes.extend(branch for branch in part[keyword] if isinstance(branch, dict))
        return targets


def _too_deep(place: _Place | None) -> SchemaPastLimit:
    return SchemaPastLimit(f"its chain of `$ref`s nests more than {MAX_REF_HOPS} levels deep (each hop is one)",
                           _path(place))


def _path(place: _Place | None) -> str:
    return "" if place is None else place.path()


def _target(document: dict, ref: str) -> dict | None:
    """The part of `document` a local `$ref` points to (JSON Pointer after `#`), or None."""
    if not ref.startswith("#"):
        return None
    node: object = document
    for part in (p for p in ref[1:].split("/") if p):
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            return None
    return node if isinstance(node, dict) else None


def check_size(schema: dict) -> None:
    """Raise `SchemaPastLimit` where `schema` passes one of the limits (module docstring)."""
    SizeCheck(schema).run()
