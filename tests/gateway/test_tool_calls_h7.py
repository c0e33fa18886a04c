"""Parallel calls a local model writes on separate lines (QA67 M3): the whitespace that only
separates or surrounds `<tool_call>` blocks is no content. A scripted engine (one character
a token) writes the reply; its events go through the chat stream writer, the whole chat
completion, the Responses stream writer and the whole response, as a request's do."""
import json
import random

import pytest

from shards.protocol import FinishEvent, SamplingParams, TokenEvent

from gateway.backend import Prepared, TextDelta, ToolCallDelta, Usage
from gateway.collected import Reply
from gateway.local_generation import LocalCall, run_free
from gateway.openai_format import ChunkWriter, ResponseHeader, chat_completion
from gateway.responses_format import ResponsesRequest
from gateway.responses_stream import ResponsesStreamWriter, whole_response
from gateway.tool_calls import CallPiece, ContentPiece, ToolCallStreamParser, parse_tool_calls

PROMPT = [ord(c) for c in "<prompt>"]
NAMES = frozenset({"get_weather", "get_time"})
WEATHER_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
TIME_CALL = '<tool_call>\n{"name": "get_time", "arguments": {"tz": "Asia/Tokyo"}}\n</tool_call>'
TWO_CALLS = WEATHER_CALL + "\n" + TIME_CALL + "\n"   # as Hermes/Qwen-style models write parallel calls
RESPONSES_REQUEST = ResponsesRequest(model="m", input="x", tools=[
    {"type": "function", "name": name, "parameters": {"type": "object"}} for name in sorted(NAMES)])


class CharTokenizer:
    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [ord(c) for c in text]


class ScriptedEngine:
    """Writes `text`, one character a token, then stops."""

    max_context_tokens = 100_000

    def __init__(self, text: str) -> None:
        self.text, self.tokenizer = text, CharTokenizer()

    async def generate(self, item):
        for index, char in enumerate(self.text):
            yield TokenEvent(item.request_id, [ord(char)], char, worker_id="w0" if index == 0 else None,
                             num_cached_tokens=0 if index == 0 else None)
        yield FinishEvent(item.request_id, "stop", len(item.prompt_token_ids), 0, len(self.text), 0.01, "w0")


async def events_for(text: str) -> list:
    call = LocalCall(PROMPT, SamplingParams(max_tokens=1000), None, NAMES, None, False,
                     tool_schemas={name: None for name in NAMES})
    prepared = Prepared("req", "t", "m", len(PROMPT), len(PROMPT) + 1000, call, PROMPT)
    return [event async for event in run_free(ScriptedEngine(text), prepared, call)]


def chat_stream(events) -> list[dict]:
    writer = ChunkWriter(ResponseHeader("chatcmpl-x", "m", 1), is_chat=True, include_usage=False)
    raw = writer.opening() + b"".join(writer.event(event) for event in events)
    return [json.loads(line.removeprefix(b"data: ")) for line in raw.split(b"\n") if line.startswith(b"data: ")]


def chat_whole(events) -> dict:
    reply = Reply.of(1)
    for event in events:
        reply.add(event)
    return chat_completion(ResponseHeader("chatcmpl-x", "m", 1), reply, Usage(5, 9))["choices"][0]["message"]


def responses_stream(events) -> list[dict]:
    writer = ResponsesStreamWriter("resp_x", RESPONSES_REQUEST, created_at=1)
    raw = writer.opening() + b"".join(writer.event(event) for event in events)
    return [json.loads(line.removeprefix(b"data: ")) for line in raw.split(b"\n") if line.startswith(b"data: ")]


def responses_whole(events) -> dict:
    writer = ResponsesStreamWriter("resp_x", RESPONSES_REQUEST, created_at=1)
    for event in events:
        writer.collected.add(event)
    return whole_response("resp_x", RESPONSES_REQUEST, writer.collected, created_at=1)


def streamed_pieces(text: str, step: int) -> list:
    parser = ToolCallStreamParser(NAMES)
    pieces = []
    for at in range(0, len(text), step):
        pieces += parser.feed(text[at:at + step])
    return pieces + parser.finish()


@pytest.mark.parametrize("text", [TWO_CALLS, "\n" + TWO_CALLS, WEATHER_CALL + "\n\n  \n" + TIME_CALL,
                                  WEATHER_CALL + " \r\n\t" + TIME_CALL + "\n\n"])
def test_whitespace_between_and_around_calls_is_no_content_for_any_split(text):
    for step in (1, 2, 3, 7, 12, len(text)):
        pieces = streamed_pieces(text, step)
        assert [p for p in pieces if isinstance(p, ContentPiece)] == [], step
        assert [p.call.name for p in pieces if isinstance(p, CallPiece)] == ["get_weather", "get_time"]


def test_streamed_content_is_the_whole_text_parses_when_the_reply_starts_with_text_or_a_call():
    rng = random.Random(7)
    for _ in range(300):
        chunks = [rng.choice(["Sure.", WEATHER_CALL, TIME_CALL, "done", "<tool_call>broken</tool_call>"])]
        chunks += [rng.choice(["\n", " ", "\n\n", "Sure.", "a b", WEATHER_CALL, TIME_CALL, "<tool_"])
                   for _ in range(rng.randrange(0, 7))]
        text = "".join(chunks)
        pieces = streamed_pieces(text, rng.choice((1, 2, 5, 13, 40)))
        content = "".join(p.text for p in pieces if isinstance(p, ContentPiece))
        assert (content or None) == parse_tool_calls(text, NAMES).content, text


def test_a_reply_of_text_alone_keeps_its_whitespace():
    text = "\n  Line one.\n\nLine two.  \n\n"
    for step in (1, 3, len(text)):
        assert "".join(p.text for p in streamed_pieces(text, step)) == text


async def test_two_calls_on_separate_lines_are_calls_only_in_a_chat_stream_and_a_whole_completion():
    events = await events_for(TWO_CALLS)
    assert [e for e in events if isinstance(e, TextDelta)] == []
    chunks = chat_stream(events)
    contents = [c["choices"][0]["delta"].get("content") for c in chunks]
    assert contents[0] == "" and [c for c in contents[1:] if c is not None] == []   # the role chunk's only
    names = [call["function"]["name"] for c in chunks for call in c["choices"][0]["delta"].get("tool_calls", [])
             if "name" in call["function"]]
    assert names == ["get_weather", "get_time"] and chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    message = chat_whole(events)
    assert message["content"] is None
    assert [json.loads(c["function"]["arguments"]) for c in message["tool_calls"]] == [
        {"city": "Paris"}, {"tz": "Asia/Tokyo"}]


async def test_two_calls_on_separate_lines_are_two_function_call_items_in_a_response():
    events = await events_for(TWO_CALLS)
    sent = responses_stream(events)
    added = [e["item"]["type"] for e in sent if e["type"] == "response.output_item.added"]
    assert added == ["function_call", "function_call"]
    assert not [e for e in sent if e["type"].startswith("response.output_text")]
    [completed] = [e for e in sent if e["type"] == "response.completed"]
    assert [item["type"] for item in completed["response"]["output"]] == ["function_call", "function_call"]
    whole = responses_whole(events)
    assert [(item["type"], item.get("name")) for item in whole["output"]] == [
        ("function_call", "get_weather"), ("function_call", "get_time")]


async def test_text_before_calls_stays_one_message_without_the_whitespace_around_the_calls():
    events = await events_for("Checking both.\n" + TWO_CALLS)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Checking both."
    assert chat_whole(events)["content"] == "Checking both."
    assert [item["type"] for item in responses_whole(events)["output"]] == ["message", "function_call",
                                                                            "function_call"]


async def test_text_after_the_calls_is_one_message_after_them():
    events = await events_for(TWO_CALLS + "\nBoth asked.")
    assert chat_whole(events)["content"] == "Both asked."
    whole = responses_whole(events)
    assert [item["type"] for item in whole["output"]] == ["function_call", "function_call", "message"]
    assert whole["output"][2]["content"][0]["text"] == "Both asked."
    assert [item["type"] for item in whole["output"]] == [
        e["item"]["type"] for e in responses_stream(events) if e["type"] == "response.output_item.added"]
    assert [e.index for e in events if isinstance(e, ToolCallDelta) and e.name] == [0, 1]


def test_held_whitespace_is_kept_as_parts_not_rejoined_at_each_delta():
    """A long run of whitespace stays linear: each delta is held as its own part."""
    parser = ToolCallStreamParser(NAMES)
    assert parser.feed("Sure.") == [ContentPiece("Sure.")]
    for _ in range(5000):
        assert parser.feed("\n") == []
    assert len(parser._space) == 5000 and max(map(len, parser._space)) == 1
    assert parser.feed("Next") == [ContentPiece("\n" * 5000 + "Next")]
