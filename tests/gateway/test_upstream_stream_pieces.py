"""Upstream streams in the pieces providers send: a tool call's name split over deltas or
repeated in each (gateway/upstream_replies.py `name_piece`, read by the chat chunks and the
collected reply alike), and an SSE event whose JSON spans several `data:` lines
(gateway/passthrough.py `sse_json`)."""
from __future__ import annotations

import asyncio
import json

import pytest

from gateway.backend import ToolCallDelta
from gateway.collected import Collected
from gateway.errors import ApiError
from gateway.openai_format import ChunkWriter, ResponseHeader
from gateway.passthrough import sse_json
from gateway.upstream_replies import events_from_stream, name_piece

ARGUMENTS = ['{"city": ', '"Paris"}']


def _chunks(names: list[str | None]) -> list[dict]:
    """A chat stream of one tool call whose deltas carry `names` (one delta each, the
    arguments in the last two), then its finish and usage."""
    deltas = []
    for i, name in enumerate(names):
        call: dict = {"index": 0, "function": {"arguments": ARGUMENTS[i - len(names) + 2]
                                               if i >= len(names) - 2 else ""}}
        if i == 0:
            call["id"] = "call_1"
            call["type"] = "function"
        if name is not None:
            call["function"]["name"] = name
        deltas.append({"choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}]})
    deltas.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    deltas.append({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}})
    return deltas


async def _aiter(items):
    for item in items:
        yield item


def _events(chunks: list[dict]) -> list:
    async def run():
        return [event async for event in events_from_stream(_aiter(chunks), True, 5, 0.0)]
    return asyncio.run(run())


def _chat_stream_name(events: list) -> str:
    """The name a client gets by joining the chat chunks' name pieces (as the openai SDK does)."""
    writer = ChunkWriter(ResponseHeader("chatcmpl-1", "m", 1700000000), is_chat=True, include_usage=False,
                         num_choices=1)
    name = ""
    for event in events:
        if isinstance(event, ToolCallDelta):
            body = json.loads(writer.event(event).removeprefix(b"data: ").removesuffix(b"\n\n"))
            name += body["choices"][0]["delta"]["tool_calls"][0]["function"].get("name") or ""
    return name


@pytest.mark.parametrize("names", [
    ["get_weather", None, None],                      # OpenAI: the whole name first
    ["get_", "weather", None, None],                  # split
    ["get_weather", "get_weather", "get_weather"],   # repeated whole in every delta
    ["get", "get_wea", "get_weather", None],          # the name so far, growing
    ["", "get_weather", None, None],                  # an empty name first
])
def test_one_stream_gives_one_tool_name_to_chat_and_to_the_collected_reply(names):
    events = _events(_chunks(names))
    collected = Collected()
    for event in events:
        collected.add(event)
    assert collected.tool_calls[0].name == "get_weather"
    assert _chat_stream_name(events) == "get_weather"
    assert "".join(collected.tool_calls[0].argument_parts) == '{"city": "Paris"}'


@pytest.mark.parametrize("choice", [1, "x", None, [1, 2], {"index": 0, "delta": [1, 2]}, {"index": 0, "delta": "hi"}])
def test_a_choice_or_delta_that_is_not_an_object_is_a_malformed_reply(choice):
    """QA113: passthrough skipped such a chunk and finished 200 (litellm's path is a 502)."""
    with pytest.raises(ApiError) as raised:
        _events([{"choices": [{"index": 0, "delta": {"content": "a"}, "finish_reason": None}]},
                 {"choices": [choice]}] + _chunks(["f", None, None])[-2:])
    assert (raised.value.status, raised.value.code) == (502, "upstream_error")
    assert "not an object" in raised.value.message


def test_a_finishing_choice_without_a_delta_is_read():
    events = _events([{"choices": [{"index": 0, "delta": {"content": "a"}, "finish_reason": None}]},
                      {"choices": [{"index": 0, "finish_reason": "stop"}]},
                      {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}}])
    assert events[-1].finish_reason == "stop"


def test_name_piece_known_answers():
    assert name_piece("", "get_") == "get_"
    assert name_piece("get_", "weather") == "weather"
    assert name_piece("get_weather", "get_weather") == ""
    assert name_piece("get", "get_weather") == "_weather"
    assert name_piece("get_weather", None) == ""
    assert name_piece("get_weather", "") == ""


class _FakeResponse:
    """What `sse_json` reads of an aiohttp response: its content type and its lines."""

    content_type = "text/event-stream"

    def __init__(self, body: bytes):
        self.content = _aiter(body.splitlines(keepends=True))


def _payloads(body: bytes) -> list:
    async def run():
        return [chunk async for chunk in sse_json(_FakeResponse(body))]
    return asyncio.run(run())


def test_an_event_spread_over_several_data_lines_is_one_payload():
    body = (b': keep-alive\n\nevent: chunk\ndata: {\ndata:  "id": "a",\r\ndata: "n": 1\ndata: }\nid: 7\n\n'
            b'data: {"id": "b"}\n\ndata:{"id": "c"}\r\n\r\ndata: [DONE]\n\n')
    assert _payloads(body) == [{"id": "a", "n": 1}, {"id": "b"}, {"id": "c"}]


def test_whole_payloads_on_consecutive_data_lines_and_an_unended_last_event_are_read():
    assert _payloads(b'data: {"id": "a"}\ndata: {"id": "b"}\ndata: {\ndata: "id": "c"}') == [
        {"id": "a"}, {"id": "b"}, {"id": "c"}]
    assert _payloads(b'data: {"id": "a"}\n\ndata: [DONE]\n\ndata: {"id": "late"}\n\n') == [{"id": "a"}]


def test_an_empty_data_line_after_a_whole_payload_adds_nothing():
    """QA98: `data: {...}` then `data:` in one event is the payload and a newline (SSE)."""
    assert _payloads(b'data: {"id": "a"}\ndata:\n\ndata:\ndata: {"id": "b"}\n\ndata: [DONE]\n\n') == [
        {"id": "a"}, {"id": "b"}]


def test_an_error_event_of_several_lines_is_the_upstreams_error():
    body = b'data: {"error":\ndata: {"message": "overloaded", "code": "busy"}}\n\n'
    with pytest.raises(ApiError) as caught:
        _payloads(body)
    assert caught.value.status == 502 and "overloaded" in caught.value.message


def test_an_event_that_is_not_json_stays_an_error():
    with pytest.raises(json.JSONDecodeError):
        _payloads(b'data: {"id": \ndata: oops\n\n')
