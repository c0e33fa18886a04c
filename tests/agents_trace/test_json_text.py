"""JSON nesting bounds: known depths, early stop, and the parsers that use them."""
import json

import pytest

from agents_trace.content import input_messages_json
from agents_trace.conversation import encode_message
from agents_trace.json_text import MAX_JSON_DEPTH, json_depth, loads_bounded
from gateway.tool_calls import parse_tool_calls

DEEP = "[" * 3000 + "]" * 3000   # past the C parser's own recursion limit


def nested(levels: int) -> list:
    value: list = []
    for _ in range(levels - 1):
        value = [value]
    return value


@pytest.mark.parametrize("value,depth", [
    (1, 0), ("x", 0), (None, 0), ([], 1), ({}, 1), ({"a": [1, {"b": []}]}, 4),
    ([[], [[[]]], {}], 4), ({"a": "b", "c": {"d": {"e": 1}}}, 3),
])
def test_json_depth_known_answers(value, depth):
    assert json_depth(value) == depth


def test_json_depth_stops_past_the_limit_without_recursing():
    deep = nested(100_000)   # a recursive walk would exhaust the stack
    assert json_depth(deep, limit=10) == 11
    assert json_depth(nested(10), limit=10) == 10


def test_loads_bounded_accepts_up_to_the_limit_and_refuses_past_it():
    assert loads_bounded(json.dumps(nested(MAX_JSON_DEPTH))) == nested(MAX_JSON_DEPTH)
    with pytest.raises(ValueError, match="nested more than"):
        loads_bounded(json.dumps(nested(MAX_JSON_DEPTH + 1)))
    with pytest.raises(ValueError, match="nested more than"):
        loads_bounded(DEEP)
    with pytest.raises(ValueError):
        loads_bounded("{not json")


def test_deep_tool_arguments_stay_text_in_digests_and_span_content():
    message = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": DEEP}}]}
    assert encode_message(message)   # no RecursionError: the arguments are kept as text
    parts = json.loads(input_messages_json([message]))[0]["parts"]
    assert parts[0]["arguments"] == DEEP


def test_a_deeply_nested_model_output_is_text_not_a_tool_call():
    output = parse_tool_calls('{"name": "f", "arguments": ' + DEEP + "}", frozenset({"f"}))
    assert output.tool_calls == [] and output.content
