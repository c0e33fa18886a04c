"""Tools offered with a JSON response format: a reply that opens with "<" or "[" is a call
only when it can still become one (the `<tool_call>` tag, a list of call objects);
otherwise it is prose, and the object after it is the JSON reply, streamed from its brace
(SmolLM2 opens its turn after a tool result with `<tool_response>`)."""
import json

import pytest

from gateway.backend import TextDelta, ToolCallDelta
from gateway.json_or_calls import MAX_PROSE_CHARS, NOT_JSON, PROSE_ONLY, json_reply_start
from gateway.tool_calls import parse_tool_calls
from gateway.tool_forcing import json_object_in
from tests.gateway.test_json_or_calls import TOOLS, ScriptedContinuations, reply, streamed_reply, text_of

N = NOT_JSON
ECHO = '<tool_response>\n{"city": "Paris", "days": 3}\n</tool_response>\nIt is sunny.'


@pytest.mark.parametrize("text,expected", [
    ("<", None), ("<tool_", None), ("<tool_call", None), ("  <tool_call", None), ("<tool_r", None),
    ("<tool_response>\n", None), ('<tool_response>\n{"ci', None), ('<tool_response>\n{"city"', 16),
    ('  <tool_response>\n{"city"', 18), ('<b>Weather</b>: {"days"', 16),
    ('<tool_response>\n{"name": "search"} {"city"', 35),   # a call-like object after prose is skipped
    ("<tool_call>", N), ('<tool_call>\n{"city"', N), ('<tool_response>{}</tool_response><tool_call>{"name"', N),
    ("<" + "w" * MAX_PROSE_CHARS, PROSE_ONLY), ("<" + "w" * MAX_PROSE_CHARS + "<tool_c", None),
    ("[", None), ("[ \n", None), ("[{", None), ('[{"name": "se', None), ('[ {"name": "search"', N),
    ('[{"arguments"', N), ('[{"name": "gx', 1), ('[{"city"', 1), ('[\n  {"days"', 4), ("[{}", None),
    ('[{}, {"city"', 5), ('[1, 2] {"city"', 7), ('["a", "b"]', None), ("[]", None),
    ('```json\n[{"name": "search"', N), ('```json\n[{"city"', 9), ("[" + "w" * MAX_PROSE_CHARS, PROSE_ONLY)],
    ids=lambda value: repr(value)[:32] if isinstance(value, str) else None)
def test_an_opening_that_cannot_become_a_call_is_prose(text, expected):
    assert json_reply_start(text, TOOLS) == expected


async def test_a_reply_opening_with_a_tool_response_tag_streams_the_object_after_it():
    free = ["<tool", "_response", ">\n", '{"city": "Par', 'is",', ' "days": 3', "}", "\n</tool_response>", " more"]
    events, read_at_first, generate = await streamed_reply(free)
    assert text_of(events) == '{"city": "Paris", "days": 3}'
    assert read_at_first is not None and read_at_first <= 5   # sent while the model was still writing
    assert len([e for e in events if isinstance(e, TextDelta)]) > 1
    assert generate.free_stopped_early and generate.num_free_read == 7
    assert events[-1].finish_reason == "stop" and not any(isinstance(e, ToolCallDelta) for e in events)


@pytest.mark.parametrize("free", [
    ["<tool", "_call", ">\n", '{"name": "get_weather", ', '"arguments": {"city": "Oslo"}}', "\n</tool_call>"],
    ["<", "tool_call>", '{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>'],
])
async def test_a_tool_call_tag_written_in_pieces_is_still_a_call(free):
    events = await reply(ScriptedContinuations(free))
    calls = [e for e in events if isinstance(e, ToolCallDelta)]
    assert calls[0].name == "get_weather" and json.loads("".join(c.arguments for c in calls)) == {"city": "Oslo"}
    assert text_of(events) == "" and events[-1].finish_reason == "tool_calls"


async def test_a_list_of_calls_is_still_read_whole_as_calls():
    free = ['[{"name": "search", "arguments": {"q": "a"}}, ', '{"name": "get_weather", "arguments": {"city": "Oslo"}}]']
    generate = ScriptedContinuations(free)
    events = await reply(generate)
    assert [e.name for e in events if isinstance(e, ToolCallDelta) and e.name] == ["search", "get_weather"]
    assert not generate.free_stopped_early and events[-1].finish_reason == "tool_calls"


async def test_a_list_of_reply_objects_streams_its_first_object():
    generate = ScriptedContinuations(["[", '{"city": "Rome",', ' "days": 2}', "]", " more"])
    events = await reply(generate)
    assert text_of(events) == '{"city": "Rome", "days": 2}' and len(events) > 2
    assert generate.free_stopped_early and events[-1].finish_reason == "stop"


@pytest.mark.parametrize("text", [ECHO, '[{"city": "Rome", "days": 2}]', '<b>Rome</b> {"city": "Rome", "days": 2}'])
async def test_the_reply_is_the_same_however_the_text_is_split_and_as_when_read_whole(text):
    """Streamed token by token or delivered in one piece (a non-streamed worker reply), the
    reply is the same object, and the one the read-whole path would take from that text."""
    by_char = await reply(ScriptedContinuations(list(text), max_total=1000))
    at_once = await reply(ScriptedContinuations([text], max_total=1000))
    assert text_of(by_char) == text_of(at_once)
    assert parse_tool_calls(text, TOOLS).tool_calls == []
    assert json.loads(text_of(by_char)) == json_object_in(text)
    assert by_char[-1].finish_reason == at_once[-1].finish_reason == "stop"
