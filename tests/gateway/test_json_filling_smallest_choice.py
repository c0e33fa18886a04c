"""Schemas whose smallest valid value is small, though a part of them is huge, are filled
with that small value (QA83 #3): an optional property whose smallest value would not fit
is left out, a `["array", "null"]` takes its null, an `anyOf` its smaller branch. The
count up front (`num_values_inside`) and the writer (`members`, `value`, `minimal`) share
one definition of "smallest". A required huge array, with no smaller choice, is still
refused, before it is written."""
import json

import httpx
import pytest

from gateway.json_filling import JsonText, LeafFiller
from gateway.json_heights import Heights
from gateway.json_schemas import SchemaRoot
from gateway.json_smallest import SchemaTooLarge, num_values_inside
from gateway.tool_forcing import forced_json, is_valid

INTEGER = {"type": "integer"}
HUGE = {"type": "array", "items": INTEGER, "minItems": 200_000}
NO_REQUIRED = {"type": "object", "properties": {"v": HUGE, "w": INTEGER}}
NULLABLE_ARRAY = {"type": "object", "required": ["v"],
                  "properties": {"v": {"type": ["array", "null"], "items": INTEGER, "minItems": 200_000}}}
ANY_OF_FIRST_HUGE = {"type": "object", "required": ["v"],
                     "properties": {"v": {"anyOf": [HUGE, {"type": "null"}]}}}
REQUIRED_HUGE = {"type": "object", "required": ["v"], "properties": {"v": HUGE}}
SHAPES = [(NO_REQUIRED, lambda w: {"w": w}), (NULLABLE_ARRAY, lambda w: {"v": None}),
          (ANY_OF_FIRST_HUGE, lambda w: {"v": None}),
          ({"type": "object", "required": ["o"], "properties": {"o": NO_REQUIRED}}, lambda w: {"o": {"w": w}}),
          # QA89: a list with no minItems whose item is too large to write is empty
          ({"type": "object", "required": ["l"], "properties": {"l": {"type": "array", "items": HUGE}}},
           lambda w: {"l": []})]
IDS = ["no_required", "nullable_array", "any_of_first_huge", "nested_no_required", "list_of_huge_items"]


def opening_model(answer: str):
    """generate() for a model that answers `answer` to every ask ("[": it opens the huge array)."""
    async def generate(suffix: str, max_tokens: int, stop: tuple[str, ...]) -> str:
        return answer
    return generate


async def fill(schema: dict, answer: str = "", can_ask: bool = True) -> tuple[str, LeafFiller]:
    filler = LeafFiller(schema, opening_model(answer), JsonText(""), can_ask=lambda: can_ask)
    return "".join([piece async for piece in filler.root_object()]), filler


@pytest.mark.parametrize("answer,can_ask,w", [("", False, 0), ("[", True, 0), ("7", True, 7)])
@pytest.mark.parametrize("schema,expected", SHAPES, ids=IDS)
async def test_a_schema_with_a_small_smallest_value_gets_it(schema, expected, answer, can_ask, w):
    """Was: SchemaTooLarge after writing 100,000 values (a 400, or ~700 KB streamed, then an
    error). `w`: the integer property's value (the model's 7, else the zero)."""
    text, filler = await fill(schema, answer, can_ask)
    assert json.loads(text) == expected(w) and is_valid(json.loads(text), schema)
    assert filler._num_values < 10   # nothing of the huge part was written
    assert num_values_inside(schema, Heights(SchemaRoot(schema))) < 10   # the count let it through


async def test_a_required_huge_array_is_still_refused_before_it_is_written():
    with pytest.raises(SchemaTooLarge):
        await fill(REQUIRED_HUGE, "[")
    text_filler = LeafFiller(REQUIRED_HUGE, opening_model(""), JsonText(""), can_ask=lambda: False)
    with pytest.raises(SchemaTooLarge):
        [piece async for piece in text_filler.root_object()]
    assert text_filler._num_values < 10   # refused at once, not after 100,000 values


async def test_optional_properties_that_fit_are_all_written_as_before():
    schema = {"type": "object", "properties": {"v": {**HUGE, "minItems": 3}, "w": INTEGER}}
    text, _ = await fill(schema, "", False)
    assert json.loads(text) == {"v": [0, 0, 0], "w": 0}


async def test_minimal_takes_the_branch_with_the_fewest_values_as_the_count_does():
    """One definition: of an array of 5 (6 values, 1 level) and an object 2 levels deep (3
    values), the count takes the object, so `minimal` writes it (it wrote the array)."""
    deep = {"type": "object", "required": ["a"], "properties": {"a": {
        "type": "object", "required": ["b"], "properties": {"b": INTEGER}}}}
    choice = {"anyOf": [{**HUGE, "minItems": 5}, deep]}
    schema = {"type": "object", "required": ["x"], "properties": {"x": choice}}
    filler = LeafFiller(schema, opening_model(""), JsonText(""))
    assert await filler.minimal(choice) == {"a": {"b": 0}}
    assert filler._num_values == num_values_inside(schema, Heights(SchemaRoot(schema))) == 3


async def test_an_object_the_model_began_is_completed_without_its_huge_optional_property():
    """`complete` (from the frames of the model's free try after the forced `{`: `"w": 5, `) leaves `v` out too."""
    async def stream(suffix, max_tokens, stop):
        yield '"w": 5, '

    text = "".join([piece async for piece in forced_json(NO_REQUIRED, opening_model("["), 50, stream)])
    assert json.loads(text) == {"w": 5}


def _reply_json(gateway, body: dict, stream: bool) -> tuple[int, str]:
    """The status and the JSON text of the reply (content, or the forced call's arguments)."""
    with httpx.stream("POST", f"{gateway.base_url}/v1/chat/completions", headers=gateway.headers("alpha"),
                      timeout=60, json={"model": "tiny", "stream": stream, **body}) as response:
        content = response.read()
    if response.status_code != 200 or not stream:
        reply = json.loads(content)
        if response.status_code != 200:
            return response.status_code, content.decode()
        message = reply["choices"][0]["message"]
        return 200, message["tool_calls"][0]["function"]["arguments"] if message.get("tool_calls") \
            else message["content"]
    text = ""
    for line in content.decode().splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        event = json.loads(line[6:])
        assert "error" not in event, event
        for choice in event.get("choices", ()):
            delta = choice.get("delta", {})
            text += delta.get("content") or ""
            text += "".join(call.get("function", {}).get("arguments") or "" for call in delta.get("tool_calls") or ())
    return 200, text


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("tool", [False, True])
@pytest.mark.parametrize("schema,expected", SHAPES[:3], ids=IDS[:3])
def test_over_http_the_reply_is_the_small_value_at_max_tokens_1(gateway, schema, expected, tool, stream):
    """Was: a 400 invalid_value after ~1 s; streamed, a 200 with ~700 KB of zeros, then an error event."""
    body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 1, "temperature": 0}
    if tool:
        body.update(tools=[{"type": "function", "function": {"name": "f", "parameters": schema}}],
                    tool_choice="required")
    else:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    status, text = _reply_json(gateway, body, stream)
    assert status == 200, text[:300]
    assert len(text) < 200 and is_valid(json.loads(text), schema), text[:300]
