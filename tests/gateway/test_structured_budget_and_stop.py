"""QA220: a JSON reply or a forced call and the request's `max_tokens` and `stop`.

F1: with tools and a JSON `response_format` together, a reply that turns out to be calls
gets all of `max_tokens` (not the JSON reply's share), and finishes "length" only when
`max_tokens` was reached. F2: `stop` cuts a JSON reply, as OpenAI's, finishing "stop"; a
forced call's arguments stay whole (QA223 F1). A reply whose values the gateway wrote
because the budget ran out is whole and valid, and finishes "stop" (a forced call "tool_calls"), as docs/api.md
says, so the SDK's parse() takes it (QA220 F4 weighed: kept).

A scripted engine plays the model: it writes `REPLY` (one token a character), continuing
whatever part of it the suffix already holds, and answers a leaf ask by the key it
continues; it honours `max_tokens` and the stop strings it is given, as a worker does."""
import json

import pytest

from shards.protocol import FinishEvent, SamplingParams, TokenEvent

from gateway.backend import Finished, Prepared, TextDelta, ToolCallDelta
from gateway.local_generation import ForcedCall, LocalCall, run_forced, run_structured
from gateway.tool_forcing import StopCut, free_budget, is_valid

PROMPT = [1, 2, 3]
SCHEMA = {"type": "object", "additionalProperties": False, "required": ["city", "country"],
          "properties": {"city": {"type": "string"}, "country": {"type": "string"}}}
WEATHER = {"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}}
TIME = {"type": "object", "required": ["tz"], "properties": {"tz": {"type": "string"}}}
TWO_CALLS = ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
             '<tool_call>\n{"name": "get_time", "arguments": {"tz": "Asia/Tokyo"}}\n</tool_call>')


class CharTokenizer:
    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [ord(char) for char in text]


class ScriptedModel:
    """Writes `reply` after the prompt (continuing a suffix that is a prefix of it), else
    the answer of the first `answers` key the suffix ends with ("" for none)."""

    max_context_tokens = 1_000_000

    def __init__(self, reply: str, answers: dict[str, str] | None = None):
        self.tokenizer, self.reply, self.answers = CharTokenizer(), reply, answers or {}
        self.suffixes: list[str] = []

    async def generate(self, item):
        suffix = "".join(chr(token) for token in item.prompt_token_ids[len(PROMPT):])
        self.suffixes.append(suffix)
        if self.reply.startswith(suffix):
            text = self.reply[len(suffix):]
        else:
            text = next((answer for key, answer in self.answers.items() if suffix.endswith(key)), "")
        ends = [text.index(stop) for stop in item.sampling.stop if stop and stop in text]
        if ends:
            text, reason = text[:min(ends)], "stop"
        else:
            reason = "length" if len(text) > item.sampling.max_tokens else "stop"
        text = text[:item.sampling.max_tokens]
        for index, char in enumerate(text):
            yield TokenEvent(item.request_id, [ord(char)], char, worker_id="w0" if index == 0 else None,
                             num_cached_tokens=0 if index == 0 else None)
        yield FinishEvent(item.request_id, reason, len(item.prompt_token_ids), 0, len(text), 0.01, "w0")


async def run(model: ScriptedModel, max_tokens: int, stop: tuple[str, ...] = (), tools: dict | None = None,
              forced: str | None = None, schema: dict | None = SCHEMA) -> list:
    call = LocalCall(PROMPT, SamplingParams(max_tokens=max_tokens, stop=stop), None,
                     None if tools is None else frozenset(tools), None if forced is None else ForcedCall(tools, forced),
                     False, response_schema=schema, tool_schemas=tools)
    prepared = Prepared("req", "t", "m", len(PROMPT), len(PROMPT) + max_tokens, call, PROMPT)
    reply = (run_structured if forced is None else run_forced)(model, prepared, call)
    return [event async for event in reply]


def text_of(events) -> str:
    return "".join(event.text for event in events if isinstance(event, TextDelta))


def calls_of(events) -> list[tuple[str, str]]:
    calls: dict[int, list[str]] = {}
    for event in events:
        if isinstance(event, ToolCallDelta):
            calls.setdefault(event.index, [event.name or "", ""])[1] += event.arguments or ""
    return [(name, arguments) for name, arguments in calls.values()]


# F1 ------------------------------------------------------------------------------------

async def test_calls_beside_a_json_format_get_all_of_max_tokens_not_the_json_share():
    tools = {"get_weather": WEATHER, "get_time": TIME}
    assert free_budget(200) < len(TWO_CALLS) < 200   # the free try alone would cut the second call
    events = await run(ScriptedModel(TWO_CALLS), 200, tools=tools)
    assert calls_of(events) == [("get_weather", '{"city": "Paris"}'), ("get_time", '{"tz": "Asia/Tokyo"}')]
    finished = events[-1]
    assert text_of(events) == "" and finished.finish_reason == "tool_calls"
    assert finished.usage.num_completion_tokens == len(TWO_CALLS)


async def test_calls_beside_a_json_format_finish_length_only_at_max_tokens():
    tools = {"get_weather": WEATHER, "get_time": TIME}
    cut_at = TWO_CALLS.index("</tool_call>") + len("</tool_call>\n<tool")
    events = await run(ScriptedModel(TWO_CALLS), cut_at, tools=tools)
    assert [name for name, _ in calls_of(events)] == ["get_weather"]
    assert events[-1].finish_reason == "length" and events[-1].usage.num_completion_tokens == cut_at


# F2 ------------------------------------------------------------------------------------

@pytest.mark.parametrize("stop,text", [
    (("Paris",), '{"city": "'), (("}",), '{"city": "Paris", "country": "France"'),
    ((", ", "ty"), '{"ci'), (("xyz", ""), '{"city": "Paris", "country": "France"}')])
@pytest.mark.parametrize("tools", [None, {"get_weather": WEATHER}])
async def test_a_json_reply_ends_before_a_stop_string_as_openais_does(stop, text, tools):
    events = await run(ScriptedModel('{"city": "Paris", "country": "France"}'), 100, stop, tools)
    assert text_of(events) == text and events[-1].finish_reason == "stop"


async def test_a_stop_string_in_what_the_gateway_fills_cuts_it_too():
    model = ScriptedModel("no json here", answers={'"city": "': 'Lyon"', '"country": "': 'France"'})
    events = await run(model, 100, ("France",))
    assert text_of(events) == '{"city": "Lyon", "country": "' and events[-1].finish_reason == "stop"


async def test_a_stop_string_never_cuts_a_forced_calls_arguments():
    """QA223 F1: cut arguments went out with finish "tool_calls" (a reply with calls cannot
    say "stop"), and an agent would run the call on cut JSON: they stay whole."""
    model = ScriptedModel('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>')
    events = await run(model, 100, ("Par",), tools={"get_weather": WEATHER}, forced="get_weather", schema=None)
    assert calls_of(events) == [("get_weather", '{"city": "Paris"}')] and events[-1].finish_reason == "tool_calls"
    whole = await run(model, 100, ("Lyon",), tools={"get_weather": WEATHER}, forced="get_weather", schema=None)
    assert calls_of(whole) == [("get_weather", '{"city": "Paris"}')] and whole[-1].finish_reason == "tool_calls"


async def test_a_stop_string_before_a_call_ends_the_free_reply_beside_a_json_format():
    model = ScriptedModel('Let me check. <tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}'
                          '\n</tool_call>', answers={'"city": "': 'Rome"', '"country": "': 'Italy"'})
    events = await run(model, 200, ("<tool_call>",), {"get_weather": WEATHER})
    assert calls_of(events) == [] and json.loads(text_of(events)) == {"city": "Rome", "country": "Italy"}


@pytest.mark.parametrize("size", [1, 2, 3, 7])
def test_stop_cut_ends_where_the_first_stop_string_completes_however_the_text_is_split(size):
    text = 'xx {"a": "abcab", "b": 1}'
    for stop, expected in [(("abcab", "cab"), 'xx {"a": "'), (("b\"", "ab"), 'xx {"a": "'),
                           (("c", "bca"), 'xx {"a": "ab'), (("zz", ""), text), ((), text)]:
        cut = StopCut(stop)
        out = "".join(cut.feed(text[at:at + size]) for at in range(0, len(text), size)) + cut.flush()
        assert out == expected and cut.stopped == (expected != text), (stop, size)


# a spent budget ------------------------------------------------------------------------------------

async def test_a_json_reply_written_without_the_model_once_the_budget_ran_out_is_whole_and_finishes_stop():
    model = ScriptedModel('{"city": "Paris", "country": "France"}')
    events = await run(model, 12)
    value = json.loads(text_of(events))
    assert is_valid(value, SCHEMA) and value["city"].startswith("Par")
    assert events[-1].finish_reason == "stop" and events[-1].usage.num_completion_tokens == 12
    roomy = await run(model, 100)
    assert json.loads(text_of(roomy)) == {"city": "Paris", "country": "France"} and roomy[-1].finish_reason == "stop"


async def test_a_forced_call_whose_budget_ran_out_stays_valid_and_finishes_tool_calls():
    model = ScriptedModel('<tool_call>\n{"name": "get_time", "arguments": {"tz": "Asia/Tokyo"}}\n</tool_call>')
    events = await run(model, 3, tools={"get_time": TIME}, forced="get_time", schema=None)
    [(name, arguments)] = calls_of(events)
    assert name == "get_time" and is_valid(json.loads(arguments), TIME)
    assert events[-1].finish_reason == "tool_calls" and events[-1].usage.num_completion_tokens <= 3
    roomy = await run(model, 100, tools={"get_time": TIME}, forced="get_time", schema=None)
    assert calls_of(roomy) == [("get_time", '{"tz": "Asia/Tokyo"}')] and roomy[-1].finish_reason == "tool_calls"


async def test_beside_tools_a_json_reply_built_once_the_budget_ran_out_finishes_stop():
    model = ScriptedModel("Hmm, let me think about it", answers={'"city": "': 'Oslo"', '"country": "': 'Norway"'})
    events = await run(model, 6, tools={"get_weather": WEATHER})
    assert is_valid(json.loads(text_of(events)), SCHEMA) and events[-1].finish_reason == "stop"
    assert isinstance(events[-1], Finished)
