"""A schema whose smallest value holds more than MAX_FILLED_VALUES values is refused where
the request's schema is checked, before the reply starts (QA78 #3: a stream sent 200,001
deltas, 41 MB, before its error event), and never one the filler could write."""
import json
import random
import time

import httpx
import pytest

from gateway import json_smallest
from gateway.errors import ApiError
from gateway.json_filling import JsonText, LeafFiller
from gateway.json_heights import Heights
from gateway.json_schemas import SchemaRoot
from gateway.json_smallest import MAX_FILLED_VALUES, SchemaTooLarge, num_values_inside
from gateway.local_schemas import local_schema
from tests.gateway.test_json_filling_long_arrays import long_array
from tests.gateway.test_json_recursive_schemas import ENTITY, _doubling
from tests.gateway.test_local import SAY_JSON, backend, _chat


def inside(schema: dict) -> int | None:
    return num_values_inside(schema, Heights(SchemaRoot(schema)))


def refused(schema: dict, param: str = "p") -> ApiError:
    with pytest.raises(ApiError) as caught:
        local_schema(schema, param)
    return caught.value


def test_the_count_is_the_values_the_filler_writes_inside_the_reply_object():
    assert inside(long_array(10)) == 11   # the array and its items
    assert inside({"type": "object", "properties": {"a": {"type": "integer"}}}) == 0   # none required
    assert inside(ENTITY) == inside(ENTITY) < 10   # recursive: ends in its null
    nullable = {"type": "object", "required": ["a"], "properties": {"a": {"anyOf": [
        {"type": "array", "items": {"type": "integer"}, "minItems": 10 ** 9}, {"type": "null"}]}}}
    assert inside(nullable) == 1   # its null: a filler may write it


@pytest.mark.parametrize("num_items,is_refused", [(MAX_FILLED_VALUES - 1, False), (MAX_FILLED_VALUES, True),
                                                  (200_000, True), (10 ** 9, True)])
def test_a_schema_too_large_to_write_is_a_400_before_any_value_is_written(num_items, is_refused):
    """At the filler's own limit: minItems 99,999 is 100,000 values (the array too), written;
    100,000 is refused, as the filler refuses it once it wrote them."""
    started = time.perf_counter()
    if not is_refused:
        assert local_schema(long_array(num_items), "p") == long_array(num_items)
        return
    error = refused(long_array(num_items), "response_format.json_schema.schema")
    assert (error.status, error.code, error.param) == (400, "invalid_value", "response_format.json_schema.schema")
    assert str(MAX_FILLED_VALUES) in error.message
    assert time.perf_counter() - started < 0.5   # no value built


def test_a_smallest_value_doubling_for_40_levels_is_refused_at_once():
    started = time.perf_counter()
    assert refused(_doubling(40)).code == "invalid_value"
    assert time.perf_counter() - started < 0.5


def test_a_schema_whose_parts_multiply_through_references_with_siblings_ends_quickly():
    """`$ref`s with a sibling keyword (each resolved once per document since FI39,
    json_schemas.SchemaRoot): the walk gives up after MAX_COUNT_STEPS steps, or decides
    (over MAX_FILLED_VALUES here: 2**17 - 2 values, past the cap)."""
    defs = {f"D{i}": {"type": "object", "required": ["a", "b"], "properties": {
        "a": {"$ref": f"#/$defs/D{i + 1}", "description": "x"},
        "b": {"$ref": f"#/$defs/D{i + 1}", "description": "y"}}} for i in range(16)}
    defs["D16"] = {"anyOf": [{"$ref": "#/$defs/D16", "title": "again"}, {"type": "integer"}] * 4}
    schema = {"$defs": defs, "$ref": "#/$defs/D0"}
    started = time.perf_counter()
    assert inside(schema) in (None, MAX_FILLED_VALUES + 1)
    assert time.perf_counter() - started < 2


def random_schema(rng: random.Random, depth: int = 0) -> dict:
    scalar = rng.choice([{"type": "integer"}, {"type": "string"}, {"enum": ["a", "b"]}, {"const": 3},
                         {"type": ["integer", "null"]}, {"type": "boolean", "default": True}])
    if depth >= 5 or rng.random() < 0.3:
        return scalar
    kind = rng.choice(["object", "array", "anyOf", "ref"])
    if kind == "object":
        names = [f"k{i}" for i in range(rng.randrange(4))]
        properties = {name: random_schema(rng, depth + 1) for name in names}
        required = [name for name in names if rng.random() < 0.7]
        return {"type": "object", "properties": properties, **({"required": required} if required else {})}
    if kind == "array":
        return {"type": "array", "items": random_schema(rng, depth + 1), "minItems": rng.choice([0, 1, 3, 20, 400])}
    if kind == "anyOf":
        return {"anyOf": [random_schema(rng, depth + 1) for _ in range(rng.randrange(1, 4))]}
    return {"$ref": "#/$defs/Node"}


@pytest.mark.parametrize("seed", range(3))
async def test_the_count_is_never_more_than_a_filler_counts(seed, monkeypatch):
    """Invariant, with the limit lowered to 300: whatever the model answers, a filler
    counts at least `num_values_inside` values; when it is over the limit, the filler
    refuses the schema too (so the 400 up front refuses nothing a reply could be
    written for)."""
    monkeypatch.setattr(json_smallest, "MAX_FILLED_VALUES", 300)
    rng = random.Random(seed)
    num_refused = 0
    for _ in range(60):
        node = {"type": "object", "properties": {"v": {"type": "integer"},
                                                 "next": {"anyOf": [{"$ref": "#/$defs/Node"}, {"type": "null"}]}},
                "required": ["v", "next"]}
        schema = {**random_schema(rng), "$defs": {"Node": node}}
        schema = {"type": "object", "required": ["x"], "properties": {"x": schema}, "$defs": schema.pop("$defs")}
        count = inside(schema)

        async def generate(suffix: str, max_tokens: int, stop: tuple[str, ...]) -> str:
            return rng.choice(["", "7", ", ", "n", '"', "]", "t"])

        filler = LeafFiller(schema, generate, JsonText(""))
        try:
            text = "".join([piece async for piece in filler.root_object()])
        except SchemaTooLarge:
            num_refused += 1
            continue
        assert count is not None and count <= 300 and count <= filler._num_values, (schema, count)
        assert isinstance(json.loads(text), dict)
    assert num_refused < 60


async def test_prepare_chat_refuses_it_before_anything_is_rendered():
    """The stand-in engine has no tokenizer: a prompt rendered would fail; the 400 comes first."""
    request = _chat(messages=SAY_JSON, max_tokens=20, response_format={
        "type": "json_schema", "json_schema": {"name": "n", "schema": long_array(200_000)}})
    with pytest.raises(ApiError) as caught:
        await backend(False).prepare_chat(request, "t", "r1")
    assert (caught.value.status, caught.value.code, caught.value.param) == (
        400, "invalid_value", "response_format.json_schema.schema")


TOOL = {"type": "function", "function": {"name": "big", "parameters": long_array(200_000)}}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("path,body,param", [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "json"}], "max_tokens": 20,
                              "response_format": {"type": "json_schema",
                                                  "json_schema": {"name": "x", "schema": long_array(200_000)}}},
     "response_format.json_schema.schema"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "call"}], "max_tokens": 20,
                              "tools": [TOOL], "tool_choice": "required"}, "tools[0].function.parameters"),
    ("/v1/responses", {"input": "json", "max_output_tokens": 20, "text": {"format": {
        "type": "json_schema", "name": "x", "schema": long_array(200_000)}}}, "text.format.schema"),
    ("/v1/responses", {"input": "call", "max_output_tokens": 20, "tool_choice": "required", "tools": [
        {"type": "function", "name": "big", "parameters": long_array(200_000)}]}, "tools[0].parameters"),
], ids=["chat", "chat_tool", "responses", "responses_tool"])
def test_over_http_the_400_comes_before_the_reply_streamed_or_not(gateway, path, body, param, stream):
    """Was, streamed: a 200 and 200,001 deltas (41 MB, 30 s) before an error event."""
    started = time.perf_counter()
    with httpx.stream("POST", f"{gateway.base_url}{path}", headers=gateway.headers("alpha"), timeout=60,
                      json={"model": "tiny", "stream": stream, **body}) as response:
        content = response.read()
    assert response.status_code == 400, content[:300]
    error = json.loads(content)["error"]
    assert (error["code"], error["param"]) == ("invalid_value", param)
    assert len(content) < 2000 and time.perf_counter() - started < 5
