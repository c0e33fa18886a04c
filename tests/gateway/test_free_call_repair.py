"""A tool call the model makes freely (tool_choice auto) is held to its tool's schema: a
scripted engine (one character a token) writes the reply and answers the repairs."""
import json

import pytest

from shards.protocol import FinishEvent, SamplingParams, TokenEvent

from gateway.backend import Finished, Prepared, TextDelta, ToolCallDelta
from gateway.local_generation import LocalCall, run_free
from gateway.tool_forcing import is_valid

WEATHER = {"type": "object", "additionalProperties": False, "required": ["city", "days"],
           "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1, "maximum": 7}}}
PROMPT = [ord(c) for c in "<prompt>"]


class CharTokenizer:
    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [ord(c) for c in text]


class ScriptedEngine:
    """The first request's reply is `free`; a later one (a continuation) gets the answer
    for how its text ends, cut at its stop strings."""

    max_context_tokens = 100_000

    def __init__(self, free: str, answers: dict[str, str]):
        self.tokenizer, self.free, self.answers = CharTokenizer(), free, answers
        self.requests, self.num_sent = [], []   # each request, and the tokens sent for it

    async def generate(self, item):
        self.requests.append(item)
        if len(self.requests) == 1:
            text = self.free
        else:
            written = "".join(map(chr, item.prompt_token_ids[len(PROMPT):]))
            text = next((a for k, a in self.answers.items() if written.endswith(k)), "\x00")
            ends = [text.index(s) for s in item.sampling.stop if s in text]
            text = text[:min(ends)] if ends else text
        text = text[:item.sampling.max_tokens]
        self.num_sent.append(len(text))
        for index, char in enumerate(text):   # the first event names the worker, as a worker's does
            yield TokenEvent(item.request_id, [ord(char)], char, worker_id="w0" if index == 0 else None,
                             num_cached_tokens=len(PROMPT) if index == 0 else None)
        yield FinishEvent(item.request_id, "stop", len(item.prompt_token_ids), 0, len(text), 0.01, "w0")


async def reply(free: str, answers: dict[str, str], schemas: dict | None = None, max_tokens: int = 200):
    engine = ScriptedEngine(free, answers)
    call = LocalCall(PROMPT, SamplingParams(max_tokens=max_tokens), None, frozenset({"get_weather"}), None, False,
                     tool_schemas={"get_weather": WEATHER} if schemas is None else schemas)
    prepared = Prepared("req", "t", "m", len(PROMPT), len(PROMPT) + max_tokens, call, PROMPT)
    return engine, [event async for event in run_free(engine, prepared, call)]


def arguments_of(events) -> dict:
    return json.loads("".join(e.arguments for e in events if isinstance(e, ToolCallDelta)))


async def test_a_valid_free_call_is_sent_as_the_model_wrote_it():
    engine, events = await reply('<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo", "days": 2}}'
                                 "</tool_call>", {})
    assert arguments_of(events) == {"city": "Oslo", "days": 2} and len(engine.requests) == 1
    assert events[-1].finish_reason == "tool_calls"


@pytest.mark.parametrize("arguments,expected", [
    ({"city": "Oslo"}, {"city": "Oslo", "days": 3}),                  # a required key missing
    ({"city": 5, "days": 2}, {"city": "Bergen", "days": 3}),          # a wrong type, and what follows it
    ({"city": "Oslo", "days": 30}, {"city": "Oslo", "days": 3}),      # out of bounds
    ({"city": "Oslo", "days": 2, "unit": "c"}, {"city": "Oslo", "days": 2}),   # a key the tool does not take
])
async def test_a_free_call_that_fails_its_tools_schema_is_repaired(arguments, expected):
    free = "Checking. <tool_call>" + json.dumps({"name": "get_weather", "arguments": arguments}) + "</tool_call>"
    engine, events = await reply(free, {'"city": "': 'Bergen"', '"days": ': " 3}"})
    assert arguments_of(events) == expected and is_valid(expected, WEATHER)
    # the space before the call only surrounds it: no content (`ToolCallStreamParser`)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Checking."
    finished = events[-1]
    assert isinstance(finished, Finished) and finished.finish_reason == "tool_calls"
    repairs = engine.requests[1:]
    assert all(item.prompt_token_ids[:len(PROMPT)] == PROMPT for item in repairs)   # each continues the prompt
    assert finished.usage.num_completion_tokens == sum(engine.num_sent) and engine.num_sent[0] == len(free)


async def test_repairs_stay_within_what_is_left_of_max_tokens():
    free = '<tool_call>{"name": "get_weather", "arguments": {}}</tool_call>'
    engine, events = await reply(free, {'"city": "': "B" * 500}, max_tokens=len(free) + 10)
    assert is_valid(arguments_of(events), WEATHER)
    assert events[-1].usage.num_completion_tokens <= len(free) + 10


async def test_two_repaired_calls_share_what_is_left_of_max_tokens():
    call = '<tool_call>{"name": "get_weather", "arguments": {"days": 2}}</tool_call>'
    free = call + call
    engine, events = await reply(free, {'"city": "': "C" * 30}, max_tokens=len(free) + 40)
    names = [e for e in events if isinstance(e, ToolCallDelta) and e.name]
    assert len(names) == 2 and events[-1].usage.num_completion_tokens == len(free) + 40 == sum(engine.num_sent)


async def test_a_reply_going_on_after_a_repaired_call_stops_where_max_tokens_is_spent():
    """The repair takes 19 tokens of the budget (its closing quote is a stop); the prose
    after the call would take the rest and more: the reply stops once the two have used
    max_tokens."""
    call = '<tool_call>{"name": "get_weather", "arguments": {"days": 2}}</tool_call>'
    free = call + " and then some words" * 10
    max_tokens = len(call) + 40
    engine, events = await reply(free, {'"city": "': "C" * 19 + '"'}, max_tokens=max_tokens)
    finished = events[-1]
    assert isinstance(finished, Finished) and finished.finish_reason == "length"
    assert finished.usage.num_completion_tokens == max_tokens
    assert arguments_of(events) == {"city": "C" * 19, "days": 2}
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    # what the free reply wrote before the budget ran out, but the whitespace around the call
    assert text == free[len(call):max_tokens - 19].strip()
    assert finished.worker == "w0" and finished.ttft_s is not None
    assert finished.usage.num_cached_tokens == len(PROMPT)


@pytest.mark.parametrize("named", [True, False])
async def test_a_forced_calls_head_waits_for_the_models_first_arguments(named):
    """The gateway knows a forced call's name without the model (named, or the only tool):
    its head is no first token, so it goes out with the first arguments the model wrote."""
    from gateway.local_generation import ForcedCall, run_forced

    engine = ScriptedEngine('{"city": "Oslo", "days": 2}', {})
    call = LocalCall(PROMPT, SamplingParams(max_tokens=100), None, frozenset({"get_weather"}),
                     ForcedCall({"get_weather": WEATHER}, "get_weather" if named else None), False,
                     tool_schemas={"get_weather": WEATHER})
    prepared = Prepared("req", "t", "m", len(PROMPT), len(PROMPT) + 100, call, PROMPT)
    events = []
    async for event in run_forced(engine, prepared, call):
        if not events:
            assert engine.num_sent, "the call's head came before the model wrote anything"
        events.append(event)
    assert events[0].name == "get_weather" and arguments_of(events) == {"city": "Oslo", "days": 2}
    assert isinstance(events[-1], Finished) and events[-1].finish_reason == "tool_calls"
