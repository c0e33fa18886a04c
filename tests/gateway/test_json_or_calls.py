"""Tools offered with a JSON response format: the reply is decided as the free text streams.
A scripted stand-in for `Continuations` gives the model's text instead of sampling it."""
import json

import pytest

from gateway.backend import Finished, TextDelta, ToolCallDelta, Usage
from gateway.json_or_calls import MAX_PROSE_CHARS, NOT_JSON, PROSE_ONLY, json_or_tool_calls, json_reply_start
from gateway.tool_forcing import is_valid

TOOLS = frozenset({"get_weather", "search"})
SCHEMA = {"type": "object", "additionalProperties": False, "required": ["city", "days"],
          "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}


def _cut(text: str, stop: tuple[str, ...]) -> str:
    """`text` up to its first stop string, as a worker stops (the stop string not sent)."""
    ends = [text.index(s) for s in stop if s in text]
    return text[:min(ends)] if ends else text


class ScriptedContinuations:
    """The free reply (suffix "") in the given pieces, then leaf answers by the last key of
    the JSON written so far, cut at the stop strings; one token per piece read. Records what was read and whether
    the free reply was stopped before its end."""

    def __init__(self, free: list[str], answers: dict[str, str] | None = None, max_total: int = 100,
                 finish_reason: str = "stop"):
        self.free, self.answers, self.max_total = free, answers or {}, max_total
        self.finish_reason = finish_reason
        self.usage = Usage(num_prompt_tokens=10)
        self.last_finish_reason = None
        self.num_free_read = 0
        self.free_stopped_early = None
        self.suffixes: list[str] = []

    async def stream(self, suffix: str, max_tokens: int, stop: tuple[str, ...]):
        self.suffixes.append(suffix)
        is_free = len(self.suffixes) == 1
        pieces = self.free if is_free else [_cut(next((a for k, a in self.answers.items() if suffix.endswith(k)),
                                                      "\x00"), stop)]
        done = False
        try:
            for piece in pieces[:max(0, self.max_total - self.usage.num_completion_tokens)]:
                self.usage.num_completion_tokens += 1
                self.num_free_read += is_free
                yield piece
            done = True
            self.last_finish_reason = self.finish_reason
        finally:
            if is_free:
                self.free_stopped_early = not done

    async def __call__(self, suffix: str, max_tokens: int, stop: tuple[str, ...]) -> str:
        return "".join([text async for text in self.stream(suffix, max_tokens, stop)])

    def can_ask(self) -> bool:
        return self.usage.num_completion_tokens < self.max_total

    def finished(self, finish_reason: str) -> Finished:
        return Finished(finish_reason, self.usage, worker="w0", ttft_s=0.1)


async def reply(generate, schema=SCHEMA, keep_one_call=False) -> list:
    return [event async for event in json_or_tool_calls(schema, TOOLS, keep_one_call, (), generate)]


def text_of(events) -> str:
    return "".join(event.text for event in events if isinstance(event, TextDelta))


J, N = 0, NOT_JSON   # the reply's object starts at the text's first non-space; may be anything else


@pytest.mark.parametrize("text,expected", [
    ("", None), ("  ", None), ("{", None), ("{}", J), ("{ 1", J), ('{"ci', None), ('{"city"', J),
    ('{"arguments": {', N), ('{"parameters"', N), ('{"name', None), ('{"name" ', None), ('{"name":', None),
    ('{"name": "get', None), ('{"name": "gx', J), ('{"name": "get_weather"', N), ('{"name": " search "', N),
    ('{"name": " sea', None), ('{"name": "Oslo"', J), ('{"name": 3', J), ('{"name" x', J), ('{"\\q": 1', J),
    ("<tool_call>", N), ("[", None),
    ("`", None), ("``", None), ("```", None), ("```json", None), ("```json\n", None), ('```json\n{"city"', 8),
    ('```\n {"name": "search"', N), ("```python\n", N), ("`x", N), ("```json and then a long line", N),
    ("Sure, ", None), ("Here it is:\n\n", None), ('Here:\n```json\n{"ci', None), ('Here:\n```json\n{"city"', 14),
    ('Use {braces} or {} then {"city"', 24), ('Done: {"name": "search"} and {"days"', 29),
    ('Let me look.<tool_call>{"name"', N), ("x {a" * 9, N), ("w" * MAX_PROSE_CHARS, None),
    ("w" * (MAX_PROSE_CHARS + 1), PROSE_ONLY), ("w" * MAX_PROSE_CHARS + "<tool_c", None),
    ("w" * MAX_PROSE_CHARS + "<b", PROSE_ONLY),
    ("x{w}" + "w" * MAX_PROSE_CHARS, PROSE_ONLY)])
def test_json_reply_start_decides_as_early_as_the_text_allows(text, expected):
    assert json_reply_start(text, TOOLS) == (expected if expected != J else len(text) - len(text.lstrip()))


async def streamed_reply(free: list[str]) -> tuple[list, int | None, "ScriptedContinuations"]:
    """The events of the JSON-or-calls reply to the model's `free` pieces, how many pieces
    were read when the first text went out (None: none did), and the continuations."""
    generate = ScriptedContinuations(free)
    events, read_at_first = [], None
    async for event in json_or_tool_calls(SCHEMA, TOOLS, False, (), generate):
        if read_at_first is None and isinstance(event, TextDelta):
            read_at_first = generate.num_free_read
        events.append(event)
    return events, read_at_first, generate


async def test_a_json_reply_streams_as_it_is_decided_and_stops_the_free_reply_where_it_closes():
    free = ['{"ci', 'ty": "Oslo",', ' "days": 3', '}', ' and some prose', ' the client never sees']
    events, read_at_first, generate = await streamed_reply(free)
    assert json.loads(text_of(events)) == {"city": "Oslo", "days": 3}
    assert read_at_first <= 2   # sent while the model was still writing
    assert len([e for e in events if isinstance(e, TextDelta)]) > 1
    assert generate.free_stopped_early and generate.num_free_read == 4
    assert events[-1].finish_reason == "stop" and not any(isinstance(e, ToolCallDelta) for e in events)


async def test_a_json_reply_that_strays_is_completed_from_where_it_was_sure():
    generate = ScriptedContinuations(['{"city": "Oslo", "days": "three"', '}'], answers={'"days": ': " 3}"})
    events = await reply(generate)
    assert json.loads(text_of(events)) == {"city": "Oslo", "days": 3}
    assert generate.free_stopped_early and generate.suffixes[-1].endswith('{"city": "Oslo", "days": ')
    assert events[-1].finish_reason == "stop"


async def test_an_object_whose_name_is_no_tool_is_the_json_reply():
    schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    generate = ScriptedContinuations(['{"name": "Os', 'lo"}', " trailing"])
    events = await reply(generate, schema)
    assert json.loads(text_of(events)) == {"name": "Oslo"} and generate.free_stopped_early


@pytest.mark.parametrize("free", [
    ['<tool_call>\n{"name": "get_weather", ', '"arguments": {"city": "Oslo"}}\n</tool_call>'],
    ['{"name": "get_weather", "arguments": {"city": "Oslo"}}'],   # a bare call
])
async def test_a_tool_call_reply_is_sent_as_calls(free):
    events = await reply(ScriptedContinuations(free))
    calls = [e for e in events if isinstance(e, ToolCallDelta)]
    assert calls[0].name == "get_weather" and calls[0].id.startswith("call_")
    assert json.loads("".join(c.arguments for c in calls)) == {"city": "Oslo"}
    assert text_of(events) == "" and events[-1].finish_reason == "tool_calls"


async def test_calls_cut_by_the_budget_finish_length_and_one_call_is_kept_when_asked():
    call = '<tool_call>{"name": "search", "arguments": {"q": "%s"}}</tool_call>'
    generate = ScriptedContinuations(["Let me look. ", call % "a", call % "b"], finish_reason="length",
                                     max_total=3)   # the whole budget spent (QA220 F1: else they go on)
    events = await reply(generate, keep_one_call=True)
    calls = [e for e in events if isinstance(e, ToolCallDelta) and e.name]
    assert [c.name for c in calls] == ["search"] and {c.index for c in calls} == {0}
    assert text_of(events) == "Let me look." and events[-1].finish_reason == "length"


async def test_a_fenced_json_reply_streams_from_its_brace_and_stops_before_the_closing_fence():
    generate = ScriptedContinuations(["```json\n", '{"city": "Rome",', ' "days": 2}', "\n```", " more"])
    events = await reply(generate)
    assert text_of(events) == '{"city": "Rome", "days": 2}'
    assert generate.free_stopped_early and generate.num_free_read == 3


async def test_an_object_after_prose_is_streamed_without_the_prose():
    generate = ScriptedContinuations(["Here it is:\n```json\n", '{"city": "Rome",', ' "days": 2}', "\n```"])
    events = await reply(generate)
    assert text_of(events) == '{"city": "Rome", "days": 2}' and len(events) > 2
    assert generate.free_stopped_early and events[-1].finish_reason == "stop"


async def test_another_fence_is_read_whole_and_its_valid_object_taken():
    generate = ScriptedContinuations(["```text\n", '{"city": "Rome", "days": 2}', "\n```"])
    events = await reply(generate)
    assert [e.text for e in events if isinstance(e, TextDelta)] == ['{"city": "Rome", "days": 2}']
    assert not generate.free_stopped_early and events[-1].finish_reason == "stop"


async def test_prose_with_no_object_is_followed_by_one_built_with_what_is_left_of_the_budget():
    generate = ScriptedContinuations(["I think", " it is sunny."], answers={'"city": "': 'Oslo"', '"days": ': "4}"},
                                     max_total=40)
    events = await reply(generate)
    value = json.loads(text_of(events))
    assert value == {"city": "Oslo", "days": 4} and is_valid(value, SCHEMA)
    assert events[-1].usage.num_completion_tokens <= 40 and events[-1].finish_reason == "stop"


async def test_long_prose_with_no_object_or_tag_stops_the_free_reply_and_the_object_is_built():
    generate = ScriptedContinuations(["Well, " + "it depends. " * 10] * 20,
                                     answers={'"city": "': 'Oslo"', '"days": ': "4}"})
    events = await reply(generate)
    assert json.loads(text_of(events)) == {"city": "Oslo", "days": 4}
    assert generate.free_stopped_early and generate.num_free_read == 5   # 5 x 126 characters > 512


async def test_a_json_reply_for_a_schema_the_reader_cannot_decide_is_taken_whole_when_valid():
    schema = {**SCHEMA, "properties": {**SCHEMA["properties"], "city": {"type": "string", "pattern": "^(?=[A-Z])"}}}
    generate = ScriptedContinuations(['{"city": "Oslo",', ' "days": 3}'])
    events = await reply(generate, schema)
    assert [e.text for e in events if isinstance(e, TextDelta)] == ['{"city": "Oslo", "days": 3}']
    assert generate.free_stopped_early is False and events[-1].finish_reason == "stop"


async def test_a_call_that_fails_its_tools_schema_is_repaired():
    params = {"type": "object", "required": ["city", "days"], "additionalProperties": False,
              "properties": {"city": {"type": "string"}, "days": {"type": "integer", "maximum": 7}}}
    generate = ScriptedContinuations(['<tool_call>{"name": "get_weather", "arguments": {"days": 30}}</tool_call>'],
                                     answers={'"city": "': 'Oslo"', '"days": ': " 9}"})
    events = [event async for event in json_or_tool_calls(SCHEMA, TOOLS, False, (), generate, {"get_weather": params})]
    calls = [e for e in events if isinstance(e, ToolCallDelta)]
    assert json.loads("".join(c.arguments for c in calls)) == {"days": 7, "city": "Oslo"}
    assert events[-1].finish_reason == "tool_calls"


async def test_values_written_once_the_budget_is_spent_go_out_joined_not_one_event_each():
    # QA78/FI4: with tools offered beside the schema too, a large minItems written without the
    # model (the budget spent on prose) was still about one event per value
    schema = {"type": "object", "required": ["a"], "additionalProperties": False,
              "properties": {"a": {"type": "array", "items": {"type": "integer"}, "minItems": 3000}}}
    generate = ScriptedContinuations(["no json here"], max_total=1)
    events = await reply(generate, schema=schema)
    value = json.loads(text_of(events))
    assert value == {"a": [0] * 3000} and is_valid(value, schema)
    assert len([e for e in events if isinstance(e, TextDelta)]) < 100   # 3,000 values: 3,001 events before
