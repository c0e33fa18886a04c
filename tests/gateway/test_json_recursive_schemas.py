"""Recursive JSON schemas (pydantic's self- and mutually referencing models, in OpenAI's
strict form too): the filler ends them in a branch that closes, so the reply validates."""
import json
import math
import random
from typing import Optional

import pytest
from openai import pydantic_function_tool
from openai.lib._pydantic import to_strict_json_schema
from pydantic import BaseModel

from gateway.json_filling import MAX_DEPTH, JsonText, LeafFiller
from gateway.json_heights import Heights
from gateway.json_schemas import SchemaRoot
from gateway.tool_forcing import call_head, forced_arguments, forced_json, is_valid


class Entity(BaseModel):
    name: str
    sub: Optional["Entity"]


class Node(BaseModel):
    name: str
    children: list["Node"]


class A(BaseModel):
    label: str
    b: Optional["B"]


class B(BaseModel):
    size: int
    a: Optional[A]
    first: "C"   # required, not nullable: C ends the loop


class C(BaseModel):
    back: Optional[B] = None


A.model_rebuild()
B.model_rebuild()

ENTITY = to_strict_json_schema(Entity)   # sub: {"anyOf": [{"$ref": "#/$defs/Entity"}, {"type": "null"}]}, required
MODELS = [Entity, Node, A]
SCHEMAS = [to_strict_json_schema(Entity), to_strict_json_schema(Node), to_strict_json_schema(A),
           Entity.model_json_schema(), Node.model_json_schema(), A.model_json_schema(),
           pydantic_function_tool(Entity)["function"]["parameters"]]


def depth_of(value) -> int:
    if isinstance(value, dict):
        return 1 + max(map(depth_of, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(depth_of, value), default=0)
    return 0


def model(branch: str = "{", more_items: str = ", "):
    """generate() for a model that always opens another level: `branch` where an
    `anyOf` is chosen, a name for each string, a 7 for each number, `more_items` to go on
    with a list."""
    async def generate(suffix: str, max_tokens: int, stop: tuple[str, ...]) -> str:
        if suffix.endswith('"'):
            return "Acme"
        if stop == ("]",):
            return more_items
        if max_tokens == 2 and "}" in stop and "\n" in stop:
            return branch
        return "7"
    return generate


async def filled(schema: dict, generate) -> dict:
    return json.loads("".join([p async for p in LeafFiller(schema, generate, JsonText("")).root_object()]))


@pytest.mark.parametrize("schema", SCHEMAS)
async def test_minimal_value_is_valid_and_small(schema):
    value = await LeafFiller(schema, model(), JsonText("")).minimal(schema)
    assert is_valid(value, schema), value
    assert depth_of(value) <= 2


async def test_minimal_takes_the_null_branch_of_a_strict_optional():
    filler = LeafFiller(ENTITY, model(), JsonText(""))
    assert await filler.minimal(ENTITY) == {"name": "", "sub": None}   # was 64 levels of "sub", ending in {}
    assert await filler.minimal(to_strict_json_schema(Node)) == {"name": "", "children": []}


@pytest.mark.parametrize("schema", SCHEMAS)
async def test_filling_a_model_that_always_nests_ends_by_max_depth(schema):
    value = await filled(schema, model())
    assert is_valid(value, schema), value
    assert depth_of(value) <= 2 * MAX_DEPTH + 2


async def test_filled_entity_parses_and_ends_in_null():
    entity = Entity.model_validate(await filled(ENTITY, model()))
    levels = 0
    while entity.sub is not None:
        entity, levels = entity.sub, levels + 1
    assert 0 < levels < MAX_DEPTH


async def test_the_model_chooses_null_where_it_starts_one():
    assert await filled(ENTITY, model(branch="null")) == {"name": "Acme", "sub": None}
    garbage = await filled(ENTITY, model(branch="?"))   # no branch starts so: the first that ends
    assert is_valid(garbage, ENTITY) and garbage["sub"] is not None


async def test_forced_json_closes_a_deep_free_try_with_nulls():
    free = '"name": "a", "sub": {' * 30 + '"name": "b'   # 31 levels open, cut inside a string

    async def stream(suffix, max_tokens, stop):
        yield free

    pieces = [p async for p in forced_json(ENTITY, model(), 200, stream)]
    entity = Entity.model_validate_json("".join(pieces))
    assert entity.name == "a" and is_valid(json.loads("".join(pieces)), ENTITY)


async def test_forced_tool_arguments_for_a_recursive_tool_validate():
    parameters = pydantic_function_tool(Entity)["function"]["parameters"]

    async def stream(suffix, max_tokens, stop):
        yield '{"name": "Acme", "sub": {"name": "Beta", "sub": '   # the model stops there

    arguments = "".join([p async for p in forced_arguments(parameters, model(), call_head("Entity"), 100, stream)])
    assert Entity.model_validate_json(arguments).sub.name == "Beta"


NOISE = ['"', "}", "]", ",", ":", "\n", "x", "1", "null", "{", "[", "\\", " "]


@pytest.mark.parametrize("seed", range(3))
async def test_forced_json_for_recursive_schemas_is_valid_whatever_the_model_writes(seed):
    rng = random.Random(seed)
    deep = {"name": "a", "sub": {"name": "b", "sub": {"name": "c", "sub": None}}}
    tree = {"name": "r", "children": [{"name": "x", "children": []}, {"name": "y", "children": [
        {"name": "z", "children": []}]}]}
    mutual = {"label": "l", "b": {"size": 2, "a": {"label": "m", "b": None}, "first": {"back": None}}}
    for schema, valid in zip(SCHEMAS[:3], [deep, tree, mutual]):
        text = json.dumps(valid)[1:]
        for _ in range(40):
            cut = rng.randrange(len(text) + 1)
            free = text[:cut] + "".join(rng.choice(NOISE) for _ in range(rng.randrange(3)))

            async def stream(suffix, max_tokens, stop, free=free):
                yield free

            async def generate(suffix: str, max_tokens: int, stop: tuple[str, ...]) -> str:
                text = "".join(rng.choice(NOISE + ["7", "true", "ab"]) for _ in range(rng.randrange(4)))
                return min((text.split(s)[0] for s in stop), key=len, default=text)

            pieces = [p async for p in forced_json(schema, generate, 100, stream)]
            value = json.loads("".join(pieces))
            assert is_valid(value, schema), (free, pieces)


def test_heights_say_how_soon_each_part_ends():
    heights = Heights(SchemaRoot(ENTITY))
    assert heights.of(ENTITY) == 1 and heights.of(ENTITY["properties"]["sub"]) == 0
    node = to_strict_json_schema(Node)
    assert Heights(SchemaRoot(node)).of(node) == 2   # {"children": []} ends it
    needs_one = {"type": "object", "required": ["kids"], "properties": {"kids": {
        "type": "array", "minItems": 1, "items": {"type": "object", "required": ["n"],
                                                  "properties": {"n": {"type": "integer"}}}}}}
    assert Heights(SchemaRoot(needs_one)).of(needs_one) == 3


class Loop(BaseModel):
    name: str
    next: "Loop"   # required and never null: no finite value


Loop.model_rebuild()


def endless_part(schema: dict) -> str | None:
    """Where the first part (root first) no finite value meets is (`Heights.too_high`, as
    local_schemas.py refuses it), or None."""
    found = Heights(SchemaRoot(schema)).too_high()
    assert found is None or found[1] == math.inf, found
    return None if found is None else found[0]


async def test_endless_part_finds_a_part_no_finite_value_meets():
    for schema in SCHEMAS:
        assert endless_part(schema) is None
    assert endless_part(Loop.model_json_schema()) == ""   # the root itself
    behind_optional = {"type": "object", "properties": {"loop": {"anyOf": [{"$ref": "#/$defs/L"}, {"type": "null"}]}},
                       "required": ["loop"],
                       "$defs": {"L": {"type": "object", "properties": {"again": {"$ref": "#/$defs/L"}},
                                       "required": ["again"]}}}
    assert endless_part(behind_optional) == "properties.loop.anyOf[0]"
    # the filler still closes it: the reply takes the null branch
    assert await LeafFiller(behind_optional, model(), JsonText("")).minimal(behind_optional) == {"loop": None}
    array_of_loops = {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/L"},
                      "$defs": behind_optional["$defs"]}
    assert endless_part(array_of_loops) == ""
    unused = {"type": "object", "properties": {}, "$defs": behind_optional["$defs"]}
    assert endless_part(unused) is None   # only parts a reply can reach count


async def test_an_optional_with_a_default_takes_a_branch_not_a_string():
    """pydantic's `n: Optional[int] = None`: the filler writes a branch's value (it wrote a
    string, as for a schema without `type`), and the default where it writes the smallest."""
    optional = {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None}
    schema = {"type": "object", "properties": {"n": optional}}   # none required: every property is written
    assert await filled(schema, model()) == {"n": 7}
    nested = {"type": "object", "properties": {"n": optional}, "required": ["n"]}
    for _ in range(MAX_DEPTH):
        nested = {"type": "object", "properties": {"x": nested}, "required": ["x"]}
    value = await filled(nested, model())   # n lies MAX_DEPTH deep: written without the model
    assert json.dumps(value) == '{"x": {"x": {"x": {"x": {"n": null}}}}}'


@pytest.mark.parametrize("answer,value", [("7", 7), ('"', "Acme"), ("null", None), ("?", 7)])
async def test_a_nested_any_of_takes_the_branch_the_model_starts(answer, value):
    inner = {"anyOf": [{"type": "integer"}, {"type": "string"}]}
    schema = {"type": "object", "properties": {"v": {"anyOf": [inner, {"type": "null"}]}}, "required": ["v"]}
    filler = LeafFiller(schema, model(branch=answer), JsonText(""))
    assert json.loads("".join([p async for p in filler.root_object()])) == {"v": value}
    assert await filler.minimal(schema) == {"v": 0}   # the lowest branches tie: the first that is not null


async def test_a_free_try_nesting_past_max_nesting_strays_and_ends_in_null():
    from gateway.json_prefix import MAX_NESTING

    async def stream(suffix, max_tokens, stop):
        yield '"name": "a", "sub": {' * (MAX_NESTING + 20)

    value = json.loads("".join([p async for p in forced_json(ENTITY, model(), 2000, stream)]))
    assert is_valid(value, ENTITY) and depth_of(value) == MAX_NESTING


def _doubling(levels: int) -> dict:
    """D0 .. D(levels): each requires two properties of the next: a smallest value of
    2 ** levels leaves, with no recursion at all."""
    defs = {f"D{i}": {"type": "object", "properties": {"a": {"$ref": f"#/$defs/D{i + 1}"},
                                                       "b": {"$ref": f"#/$defs/D{i + 1}"}},
                      "required": ["a", "b"]} for i in range(levels)}
    defs[f"D{levels}"] = {"type": "integer"}
    return {"$defs": defs, "$ref": "#/$defs/D0"}


HUGE_SCHEMAS = [
    {"type": "object", "properties": {"xs": {"type": "array", "minItems": 10 ** 9, "items": {"type": "integer"}}},
     "required": ["xs"]},
    _doubling(40),
]


@pytest.mark.parametrize("schema", HUGE_SCHEMAS, ids=["min_items_1e9", "doubling_40"])
async def test_a_schema_whose_smallest_value_is_huge_is_refused_not_built_for_ever(schema):
    """Known hazard (F7): the filler would build 10**9 items, or 2**40 leaves, on the event
    loop. It stops past MAX_FILLED_VALUES with a 400, from the model's path and from the
    minimal one alike, within seconds."""
    import time

    from gateway.errors import ApiError
    from gateway.json_smallest import MAX_FILLED_VALUES

    for fill in (lambda: filled(schema, model()), lambda: _minimal(schema)):
        started = time.perf_counter()
        with pytest.raises(ApiError) as refused:
            await fill()
        assert refused.value.status == 400 and str(MAX_FILLED_VALUES) in refused.value.message
        assert time.perf_counter() - started < 30


async def _minimal(schema: dict):
    return await LeafFiller(schema, model(), JsonText("")).minimal(schema)
