"""Forced tool calls with a scripted `generate`: the model's text is given, not sampled."""
import json

import pytest

from gateway.json_filling import MAX_ARRAY_ITEMS, JsonText, LeafFiller
from gateway.json_smallest import zero_value
from gateway.tool_forcing import (call_head, choose_tool_name, forced_arguments, forced_json, free_budget, is_valid,
                                  json_object_in)

SCHEMA = {"type": "object",
          "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                         "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                         "exact": {"type": "boolean"},
                         "where": {"type": "object", "properties": {"lat": {"type": "number"}},
                                   "required": ["lat"]}},
          "required": ["city", "days", "unit", "exact", "where"]}


async def joined(pieces) -> str:
    return "".join([piece async for piece in pieces])


async def fill_object(schema: dict, generate, head: str) -> dict:
    """A whole object filled leaf by leaf after `head`."""
    return json.loads(await joined(LeafFiller(schema, generate, JsonText(head)).root_object()))


def scripted(answers: dict[str, str]):
    """generate() that answers by the last key in the JSON written so far."""
    calls = []

    async def generate(suffix: str, max_tokens: int, stop: tuple[str, ...]) -> str:
        calls.append((suffix, max_tokens, stop))
        for key, answer in answers.items():
            if suffix.endswith(key):
                return answer
        return "\x00garbage"
    return generate, calls


def test_choose_tool_name_exact_prefix_and_fallback():
    names = ["get_weather", "search_web"]
    assert choose_tool_name("search_web", names) == "search_web"
    assert choose_tool_name("sea", names) == "search_web"
    assert choose_tool_name("zzz", names) == "get_weather"


async def test_forced_arguments_takes_valid_free_text():
    good = {"city": "Oslo", "days": 2, "unit": "celsius", "exact": True, "where": {"lat": 1.5}}
    generate, calls = scripted({'"arguments": ': json.dumps(good) + "}\n</tool_call>"})
    arguments = await joined(forced_arguments(SCHEMA, generate, call_head("get_weather"), 100))
    assert json.loads(arguments) == good
    assert len(calls) == 1 and calls[0][2] == ("</tool_call>",)


async def test_forced_arguments_fills_leaves_when_free_text_is_garbage():
    generate, calls = scripted({'"city": "': 'Paris', '"days": ': ' 3,', '"unit": ': '"fahr',
                                '"exact": ': 'true', '"lat": ': '48.85}'})
    arguments = json.loads(await joined(forced_arguments(SCHEMA, generate, call_head("w"), 100)))
    assert arguments == {"city": "Paris", "days": 3, "unit": "fahrenheit", "exact": True,
                         "where": {"lat": 48.85}}
    assert is_valid(arguments, SCHEMA)
    # every leaf prompt continues the JSON written so far, after the forced head
    assert all(suffix.startswith(call_head("w")) for suffix, _, _ in calls)
    assert calls[2][0].endswith('{"city": "Paris", "days": ')


async def test_fill_object_falls_back_to_schema_values_for_garbage():
    generate, _ = scripted({})
    arguments = await fill_object(SCHEMA, generate, "")
    assert arguments["days"] == 0 and arguments["unit"] == "celsius"
    assert arguments["exact"] is False and arguments["where"] == {"lat": 0}
    assert is_valid(arguments, SCHEMA)


@pytest.mark.parametrize("schema,value", [({"type": "string", "default": "x"}, "x"),
                                          ({"const": 5}, 5), ({"enum": ["a", "b"]}, "a"),
                                          ({"type": ["null", "integer"]}, 0),
                                          ({"type": "array"}, [])])
def test_zero_value_is_schema_valid(schema, value):
    assert zero_value(schema) == value
    assert is_valid(value, schema)


async def test_forced_json_forces_the_brace_and_keeps_a_valid_free_reply():
    good = {"city": "Oslo", "days": 2, "unit": "celsius", "exact": True, "where": {"lat": 1.5}}
    generate, calls = scripted({"{": json.dumps(good)[1:] + " and some chatter"})
    assert await joined(forced_json(SCHEMA, generate, 100)) == json.dumps(good)  # up to its closing brace
    assert calls == [("{", free_budget(100), ())]


async def test_forced_json_completes_the_free_reply_from_where_it_strays():
    # `}` before the required keys strays: "Oslo" is kept, the rest is filled
    generate, calls = scripted({"{": '"city": "Oslo"}', '"city": "': 'Rome', '"days": ': '4',
                                '"unit": ': '"cel', '"exact": ': 'false', '"lat": ': '41.9'})
    value = json.loads(await joined(forced_json(SCHEMA, generate, 100)))
    assert value == {"city": "Oslo", "days": 4, "unit": "celsius", "exact": False, "where": {"lat": 41.9}}
    assert calls[1][0] == '{"city": "Oslo", "days": '  # leaf prompts continue the reply itself: no head


async def test_forced_json_builds_the_object_when_the_free_reply_strays_at_once():
    generate, calls = scripted({"{": 'city: Oslo', '"city": "': 'Rome', '"days": ': '4',
                                '"unit": ': '"cel', '"exact": ': 'false', '"lat": ': '41.9'})
    value = json.loads(await joined(forced_json(SCHEMA, generate, 100)))
    assert value == {"city": "Rome", "days": 4, "unit": "celsius", "exact": False, "where": {"lat": 41.9}}
    assert calls[1][0] == '{"city": "'


def test_free_budget_keeps_up_to_256_tokens_for_leaf_filling():
    assert [free_budget(n) for n in (1, 2, 100, 512, 2000)] == [1, 1, 50, 256, 1744]


@pytest.mark.parametrize("text,value", [
    ('{"a": 1}', {"a": 1}),
    ('Sure! ```json\n{"a": [1, 2]}\n``` done', {"a": [1, 2]}),
    ('{broken {"b": true} tail', {"b": True}),
    ("no object here", None),
    ("[1, 2]", None),
])
def test_json_object_in_finds_the_first_parsable_object(text, value):
    assert json_object_in(text) == value


def exact(answers: dict[str, str], default: str = ""):
    """generate() that answers by the whole JSON written so far."""
    async def generate(suffix: str, max_tokens: int, stop: tuple[str, ...]) -> str:
        return answers.get(suffix, default)
    return generate


TAGS = {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}}},
        "required": ["tags"]}


async def test_fill_array_takes_items_while_the_model_goes_on():
    generate = exact({'{"tags": [': '"r', '{"tags": ["': "red", '{"tags": ["red"': ', "',
                      '{"tags": ["red", "': "blue", '{"tags": ["red", "blue"': ""})
    assert await fill_object(TAGS, generate, "") == {"tags": ["red", "blue"]}
    closed = exact({'{"tags": [': ""})  # the model closed the list at once
    assert await fill_object(TAGS, closed, "") == {"tags": []}


async def test_fill_array_keeps_min_and_max_items():
    bounded = {"type": "object", "required": ["n"], "properties": {"n": {
        "type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 3}}}
    never = exact({}, default="")  # would close the list at once, and writes no numbers
    assert await fill_object(bounded, never, "") == {"n": [0, 0]}
    always = exact({}, default=", 7")  # would go on for ever
    value = await fill_object(bounded, always, "")
    assert len(value["n"]) == 3 and is_valid(value, bounded)
    unbounded = {"type": "object", "required": ["n"], "properties": {"n": {"type": "array"}}}
    assert len((await fill_object(unbounded, always, ""))["n"]) == MAX_ARRAY_ITEMS


def streamed(pieces: list[str], log: list[str]):
    """A free try that arrives in `pieces`, logging each as it is generated."""
    async def stream(suffix: str, max_tokens: int, stop: tuple[str, ...]):
        for piece in pieces:
            log.append(f"model:{piece}")
            yield piece
    return stream


async def test_forced_json_streams_what_is_decided_as_the_model_writes():
    log: list[str] = []
    good = ['"city": "Os', 'lo", "days"', ': 2, "unit": "celsius", ', '"exact": true, "where": {"lat": 1}}', " chatter"]
    generate, calls = scripted({})
    async for piece in forced_json(SCHEMA, generate, 100, streamed(good, log)):
        log.append(f"sent:{piece}")
    assert log == ['model:"city": "Os', 'sent:{"city": "Os', 'model:lo", "days"', 'sent:lo"',
                   'model:: 2, "unit": "celsius", ', 'sent:, "days": 2, "unit": "celsius"',
                   'model:"exact": true, "where": {"lat": 1}}', 'sent:, "exact": true, "where": {"lat": 1}}']   # stopped there: " chatter" is never asked for
    assert calls == []


async def test_forced_arguments_stream_then_fill_what_the_model_left_out():
    log: list[str] = []
    generate, calls = scripted({'"days": ': '5', '"unit": ': '"f', '"exact": ': 'no', '"lat": ': '?'})
    pieces = [piece async for piece in forced_arguments(SCHEMA, generate, call_head("w"), 100,
                                                        streamed([' {"city":', ' "Oslo", "days', '": "five"'], log))]
    assert pieces[:2] == ['{"city":', ' "Oslo"']   # sent before the model strayed at "five"
    value = json.loads("".join(pieces))
    assert value == {"city": "Oslo", "days": 5, "unit": "fahrenheit", "exact": False, "where": {"lat": 0}}
    assert calls[0][0] == call_head("w") + '{"city": "Oslo", "days": '


async def test_forced_json_sends_a_schema_it_cannot_steer_once_it_validates():
    bounded = {"type": "object", "properties": {"code": {"type": "string", "pattern": "^(?=[A-Z])[A-Z]{3}$"}},
               "required": ["code"]}   # a look-ahead: a pattern the reader does not hold strings to
    log: list[str] = []
    generate, _ = scripted({'"code": "': "OSL"})
    pieces = [p async for p in forced_json(bounded, generate, 100, streamed(['"code": ', '"OSL"}'], log))]
    assert pieces == ['{"code": "OSL"}']   # whole, after the try
    pieces = [p async for p in forced_json(bounded, generate, 100, streamed(['"code": ', '"oslo"}'], log))]
    assert "".join(pieces) == '{"code": "OSL"}'   # the try failed its pattern: filled from nothing


SCHEMAS = [SCHEMA, TAGS, {"type": "object"},
           {"type": "object", "additionalProperties": False, "required": ["a", "b"],
            "properties": {"a": {"type": "array", "items": {"$ref": "#/$defs/P"}, "minItems": 1, "maxItems": 3},
                           "b": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
                           "c": {"const": "k"}},
            "$defs": {"P": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"enum": [1, 10]}},
                            "required": ["x", "y"]}}},
           {"type": "object", "required": ["n", "s", "m", "e"],
            "properties": {"n": {"type": "integer", "minimum": 2, "maximum": 9},
                           "s": {"type": "string", "minLength": 2, "maxLength": 5},
                           "m": {"type": "number", "exclusiveMinimum": 0, "multipleOf": 0.5},
                           "e": {"type": "array", "items": {"type": "string", "maxLength": 1}}}},
           {"type": "object", "required": ["c", "d"], "properties": {
               "c": {"type": "string", "pattern": "^[A-Z]{2}\\d$"}, "d": {"type": "string", "format": "date"}}}]
VALID = [{"city": "Oslo", "days": 2, "unit": "celsius", "exact": True, "where": {"lat": 1.5}},
         {"tags": ["r", "g"]}, {"k": [1, {"z": None}]},
         {"a": [{"x": 1.5, "y": 10}, {"x": -2, "y": 1}], "b": None, "c": "k"},
         {"n": 5, "s": "a\\\"c", "m": 1.5, "e": ["x", "\u00e9"]}, {"c": "AB1", "d": "2024-02-01"}]
NOISE = ['"', "}", "]", ",", ":", "\n", "x", "1", "null", "{", "[", '\\', " "]


@pytest.mark.parametrize("seed", range(4))
async def test_forced_json_is_valid_whatever_the_model_writes(seed):
    """Invariant: cut and garble a valid reply anywhere, answer leaves with noise: the
    reply sent is one JSON object valid against the (steerable) schema."""
    import random
    rng = random.Random(seed)
    for schema, valid in zip(SCHEMAS, VALID):
        text = json.dumps(valid)[1:]
        for _ in range(60):
            cut = rng.randrange(len(text) + 1)
            free = text[:cut] + "".join(rng.choice(NOISE) for _ in range(rng.randrange(3)))

            async def generate(suffix: str, max_tokens: int, stop: tuple[str, ...]) -> str:
                text = "".join(rng.choice(NOISE + ["7", "true", "ab"]) for _ in range(rng.randrange(4)))
                return min((text.split(s)[0] for s in stop), key=len, default=text)  # as the engine stops

            pieces = [p async for p in forced_json(schema, generate, 100, streamed(list(free), []))]
            value = json.loads("".join(pieces))
            assert isinstance(value, dict) and is_valid(value, schema), (free, pieces)


async def test_forced_arguments_drop_a_schema_the_model_copies_from_its_prompt():
    weather = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
               "required": ["city", "days"]}
    generate, _ = scripted({'"city": "': "Paris", '"days": ': "3"})
    echo = '{"type": "object", "properties": {"city": {"type": "string"}}}'
    arguments = await joined(forced_arguments(weather, generate, call_head("w"), 100, streamed([echo], [])))
    assert json.loads(arguments) == {"city": "Paris", "days": 3}
