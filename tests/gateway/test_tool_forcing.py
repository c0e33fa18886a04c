"""Forced tool calls with a scripted `generate`: the model's text is given, not sampled."""
import json

import pytest

from gateway.tool_forcing import (MAX_ARRAY_ITEMS, call_head, choose_tool_name, fill_object, forced_arguments,
                                  forced_json,
                                  free_budget, is_valid, json_object_in, zero_value)

SCHEMA = {"type": "object",
          "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                         "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                         "exact": {"type": "boolean"},
                         "where": {"type": "object", "properties": {"lat": {"type": "number"}},
                                   "required": ["lat"]}},
          "required": ["city", "days", "unit", "exact", "where"]}


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
    arguments = await forced_arguments(SCHEMA, generate, call_head("get_weather"), 100)
    assert json.loads(arguments) == good
    assert len(calls) == 1 and calls[0][2] == ("</tool_call>",)


async def test_forced_arguments_fills_leaves_when_free_text_is_garbage():
    generate, calls = scripted({'"city": "': 'Paris', '"days": ': ' 3,', '"unit": ': '"fahr',
                                '"exact": ': 'true', '"lat": ': '48.85}'})
    arguments = json.loads(await forced_arguments(SCHEMA, generate, call_head("w"), 100))
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
    assert json.loads(await forced_json(SCHEMA, generate, 100)) == good
    assert calls == [("{", free_budget(100), ())]


async def test_forced_json_builds_the_object_when_the_free_reply_is_not_valid():
    generate, calls = scripted({"{": '"city": "Oslo"}', '"city": "': 'Rome', '"days": ': '4',
                                '"unit": ': '"cel', '"exact": ': 'false', '"lat": ': '41.9'})
    value = json.loads(await forced_json(SCHEMA, generate, 100))
    assert value == {"city": "Rome", "days": 4, "unit": "celsius", "exact": False, "where": {"lat": 41.9}}
    assert calls[1][0] == '{"city": "'  # leaf prompts continue the reply itself: no head


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
