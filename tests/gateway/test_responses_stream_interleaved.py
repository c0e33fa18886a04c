"""A streamed Responses reply is OpenAI's item by item whatever order its chat deltas come
in (QA159 finding 1, FI60): parallel calls' deltas interleaved, one call after another,
names first, text before or between calls. Each output item's events are contiguous and
ordered (added, deltas, `.done`s, done) before the next is added, the output_index counts
the items, and the arguments assemble as the `openai` SDK (by output_index) and LangChain
(a new block at each change of output_index) assemble them; `response.completed` lists
what the events built, as the stored response does."""
from __future__ import annotations

import json

import httpx
import pytest

from gateway.backend import Finished, TextDelta, ToolCallDelta, Usage
from gateway.responses_format import ResponsesRequest
from gateway.responses_item_order import arguments_are_whole
from gateway.responses_stream import ResponsesStreamWriter, whole_response
from tests.gateway import fake_openai
from tests.gateway.serving import start_server
from tests.gateway.test_responses_upstream_fidelity import MODELS, gateway_over

WEATHER = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}
TIME = {"type": "function", "name": "get_time", "parameters": {"type": "object"}}
REQUEST = ResponsesRequest(model="m", input="x", tools=[WEATHER, TIME])
A, B = '{"city": "Paris"}', '{"tz": "CET"}'
END = Finished("tool_calls", Usage(5, 9))
CALLS = [("call_a", "get_weather", A), ("call_b", "get_time", B)]

# QA159's upstream: call 0 named, call 0's first arguments, call 1 named with its first, then each call's rest
QA159 = [ToolCallDelta(0, "call_a", "get_weather", ""), ToolCallDelta(0, None, None, A[:5]),
         ToolCallDelta(1, "call_b", "get_time", B[:3]), ToolCallDelta(0, None, None, A[5:]),
         ToolCallDelta(1, None, None, B[3:]), END]
ALTERNATING = ([ToolCallDelta(0, "call_a", "get_weather", A[:2]), ToolCallDelta(1, "call_b", "get_time", B[:2])]
               + [ToolCallDelta(i, None, None, text[n:n + 2]) for n in range(2, 18, 2)
                  for i, text in ((0, A), (1, B)) if text[n:n + 2]] + [END])
SEQUENTIAL = [ToolCallDelta(0, "call_a", "get_weather", ""), ToolCallDelta(0, None, None, A[:5]),
              ToolCallDelta(0, None, None, A[5:]), ToolCallDelta(1, "call_b", "get_time", B[:3]),
              ToolCallDelta(1, None, None, B[3:]), END]
NAMES_FIRST = [ToolCallDelta(0, "call_a", "get_", ""), ToolCallDelta(1, "call_b", "get_t", ""),
               ToolCallDelta(0, None, "weather", ""), ToolCallDelta(1, None, "ime", ""),
               ToolCallDelta(0, None, None, A), ToolCallDelta(1, None, None, B), END]
SECOND_FIRST = [ToolCallDelta(1, "call_b", "get_time", B[:4]), ToolCallDelta(0, "call_a", "get_weather", A[:4]),
                ToolCallDelta(1, None, None, B[4:]), ToolCallDelta(0, None, None, A[4:]), END]


def streamed(events, request=REQUEST, writer=None):
    """(writer, the events sent, each writer.event call's events)."""
    writer = writer or ResponsesStreamWriter("resp_abc", request, created_at=1)
    pieces = [writer.opening()] + [writer.event(event) for event in events]
    sent = [json.loads(line.removeprefix(b"data: ")) for line in b"".join(pieces).split(b"\n")
            if line.startswith(b"data: ")]
    return writer, sent, pieces


def check_item_by_item(sent) -> list[dict]:
    """The items' events one item at a time, each added -> content -> `.done`s -> done, at
    output_index 0, 1, ...; returns the items done, which the terminal response lists."""
    assert [event["sequence_number"] for event in sent] == list(range(len(sent)))
    items, open_item, stage = [], None, None
    for event in sent:
        kind = event["type"].removeprefix("response.")
        if kind == "output_item.added":
            assert open_item is None, f"item {event['output_index']} added while {open_item} is open"
            assert event["output_index"] == len(items)
            open_item, stage = event["item"], "added"
            continue
        if "output_index" not in event:
            assert open_item is None, f"{kind} while an item is open"
            continue
        assert open_item is not None and event["output_index"] == len(items), f"{kind} of another item"
        assert event.get("item_id", open_item["id"]) == open_item["id"]
        if kind == "function_call_arguments.delta":
            assert stage in ("added", "delta")
            stage = "delta"
        elif kind == "function_call_arguments.done":
            assert stage in ("added", "delta")
            stage = "arguments_done"
        elif kind == "output_item.done":
            assert event["item"]["id"] == open_item["id"]
            assert open_item["type"] == "message" or stage == "arguments_done"
            items.append(event["item"])
            open_item = None
    assert open_item is None
    assert sent[-1]["response"]["output"] == items
    return items


def sdk_arguments(sent) -> dict[int, str]:
    """The arguments as the `openai` SDK's stream accumulator keys them: by output_index."""
    arguments: dict[int, str] = {}
    for event in sent:
        if event["type"] == "response.function_call_arguments.delta":
            arguments[event["output_index"]] = arguments.get(event["output_index"], "") + event["delta"]
    return arguments


def langchain_calls(sent) -> list[tuple[str | None, str]]:
    """The calls as LangChain's Responses streaming assembles them: a new block each time
    output_index changes, the name from the item's `added` event, the block's deltas."""
    blocks: list[list] = []   # [output_index, name, arguments]
    for event in sent:
        if "output_index" not in event:
            continue
        if not blocks or blocks[-1][0] != event["output_index"]:
            blocks.append([event["output_index"], None, ""])
        if event["type"] == "response.output_item.added" and event["item"]["type"] == "function_call":
            blocks[-1][1] = event["item"]["name"]
        elif event["type"] == "response.function_call_arguments.delta":
            blocks[-1][2] += event["delta"]
    return [(name, arguments) for _, name, arguments in blocks if name is not None or arguments]


@pytest.mark.parametrize("events", [QA159, ALTERNATING, SEQUENTIAL, NAMES_FIRST],
                         ids=["qa159", "alternating", "sequential", "names_first"])
def test_parallel_calls_stream_item_by_item_whatever_order_their_deltas_come_in(events):
    writer, sent, _ = streamed(events)
    items = check_item_by_item(sent)
    assert [(item["call_id"], item["name"], item["arguments"], item["status"]) for item in items] == [
        (*call, "completed") for call in CALLS]
    assert sdk_arguments(sent) == {0: A, 1: B}
    assert langchain_calls(sent) == [("get_weather", A), ("get_time", B)]
    assert items == whole_response("resp_abc", REQUEST, writer.collected, 1)["output"]


def test_the_call_that_began_first_comes_first():
    writer, sent, _ = streamed(SECOND_FIRST)
    items = check_item_by_item(sent)
    assert [(item["name"], item["arguments"]) for item in items] == [("get_time", B), ("get_weather", A)]
    assert items == whole_response("resp_abc", REQUEST, writer.collected, 1)["output"]


def test_a_call_is_done_as_soon_as_the_next_begins_when_its_arguments_are_whole():
    """One call after another (OpenAI's chat streams): each call streams as it comes, and
    is done when the next one's arguments begin, as OpenAI's Responses stream does."""
    _, _, pieces = streamed(SEQUENTIAL)
    kinds = [[json.loads(line[6:])["type"].removeprefix("response.") for line in piece.split(b"\n")
              if line.startswith(b"data: ")] for piece in pieces[1:]]
    assert kinds == [[], ["output_item.added", "function_call_arguments.delta"], ["function_call_arguments.delta"],
                     ["function_call_arguments.done", "output_item.done", "output_item.added",
                      "function_call_arguments.delta"],
                     ["function_call_arguments.delta"],
                     ["function_call_arguments.done", "output_item.done", "completed"]]


def test_interleaved_deltas_of_a_later_call_wait_until_the_earlier_call_is_whole():
    _, _, pieces = streamed(QA159)
    assert b"get_time" not in pieces[3]   # call 1 began while call 0's arguments were partial: it waits
    assert b'"output_index":1' in pieces[4] and b"get_time" in pieces[4]   # call 0 whole: done, call 1 follows


@pytest.mark.parametrize("events, kinds", [
    ([TextDelta("Let me look."), ToolCallDelta(0, "call_a", "get_weather", ""), ToolCallDelta(0, None, None, A),
      END], ["message", "function_call"]),
    ([TextDelta("Let me "), ToolCallDelta(0, "call_a", "get_weather", A), TextDelta("look both up."),
      ToolCallDelta(1, "call_b", "get_time", ""), ToolCallDelta(0, None, None, ""),
      ToolCallDelta(1, None, None, B), END], ["message", "function_call", "function_call"]),
    ([ToolCallDelta(0, "call_a", "get_weather", A), TextDelta("Done, "), ToolCallDelta(1, "call_b", "get_time", B),
      TextDelta("twice."), END], ["function_call", "message", "function_call"]),
], ids=["text_then_call", "text_between_calls", "call_text_call_text"])
def test_text_and_calls_are_each_one_item_in_order(events, kinds):
    """The message stays one item (text may come back after a call), closed before the
    items after it are added."""
    writer, sent, _ = streamed(events)
    items = check_item_by_item(sent)
    assert [item["type"] for item in items] == kinds
    [message] = [item for item in items if item["type"] == "message"]
    assert len(message["content"]) == 1 and message["content"][0]["text"] == "".join(
        event.text for event in events if isinstance(event, TextDelta))
    assert items == whole_response("resp_abc", REQUEST, writer.collected, 1)["output"]


def test_a_reply_cut_short_in_interleaved_calls_ends_each_once_the_last_incomplete():
    request = ResponsesRequest(model="m", input="x", tools=[WEATHER, TIME], max_output_tokens=9)
    writer, sent, _ = streamed(ALTERNATING[:5] + [Finished("length", Usage(5, 9))], request)
    items = check_item_by_item(sent)
    assert [(item["arguments"], item["status"]) for item in items] == [(A[:6], "completed"), (B[:4], "incomplete")]
    assert sent[-1]["type"] == "response.incomplete"
    assert items == whole_response("resp_abc", request, writer.collected, 1)["output"]
    writer, sent, _ = streamed(ALTERNATING[:5])   # a cancel: the waiting call is added and done as it stands
    raw = writer.cancelled(Usage(5, 4))
    sent += [json.loads(line[6:]) for line in raw.split(b"\n") if line.startswith(b"data: ")]
    items = check_item_by_item(sent)
    assert [(item["arguments"], item["status"]) for item in items] == [(A[:6], "completed"), (B[:4], "incomplete")]
    assert writer.cut() == b""


def test_arguments_that_only_end_in_a_bracket_are_not_whole():
    partial = [ToolCallDelta(0, "call_a", "get_weather", '{"at": {"city": "Paris"}'),
               ToolCallDelta(1, "call_b", "get_time", B), ToolCallDelta(0, None, None, "}"), END]
    writer, sent, pieces = streamed(partial)
    assert b"get_time" not in pieces[2]
    items = check_item_by_item(sent)
    assert [item["arguments"] for item in items] == ['{"at": {"city": "Paris"}}', B]
    assert [arguments_are_whole(text) for text in ("", "{", '{"a": "}"', '{"a": 1} \n', "[1]", '"}"')] == [
        False, False, False, True, True, False]


def test_more_arguments_after_a_whole_call_are_not_sent_and_the_stream_stays_valid():
    """A broken upstream that goes on with a call after its arguments were whole JSON and
    another call began: that call was done; the stream stays valid and lists what it sent."""
    events = [ToolCallDelta(0, "call_a", "get_weather", A), ToolCallDelta(1, "call_b", "get_time", B),
              ToolCallDelta(0, None, None, " "), END]
    _, sent, pieces = streamed(events)
    assert pieces[3] == b""
    items = check_item_by_item(sent)
    assert [item["arguments"] for item in items] == [A, B]


# through the gateway, from an upstream whose chat stream interleaves two calls


KEY = "sk-fi60-alpha"


def _chunk(delta: dict, finish_reason: str | None = None) -> bytes:
    return b"data: " + json.dumps({"id": "chatcmpl-fi60", "object": "chat.completion.chunk", "created": 1,
                                   "model": "fake", "choices": [{"index": 0, "delta": delta,
                                                                 "finish_reason": finish_reason}]}).encode() + b"\n\n"


def _call(index: int, arguments: str, name: str | None = None, call_id: str | None = None) -> bytes:
    call = {"index": index, "function": {"arguments": arguments, **({"name": name} if name else {})}}
    return _chunk({"tool_calls": [{**call, **({"id": call_id, "type": "function"} if call_id else {})}]})


INTERLEAVED_STREAM = [_chunk({"role": "assistant", "content": None}), _call(0, "", "get_weather", "call_a"),
                      _call(0, A[:5]), _call(1, B[:3], "get_time", "call_b"), _call(0, A[5:]), _call(1, B[3:]),
                      _chunk({}, "tool_calls"), b"data: [DONE]\n\n"]


async def interleaving_upstream(scope, receive, send):
    """Every chat request is answered with QA159's stream of two interleaved calls."""
    if await fake_openai.request_body(scope, receive, send) is None:
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
    await send({"type": "http.response.body", "body": b"".join(INTERLEAVED_STREAM)})


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    upstream = start_server(interleaving_upstream)
    server = gateway_over(upstream.base_url, tmp_path_factory.mktemp("fi60"), KEY)
    yield server.base_url
    server.stop()
    upstream.stop()


@pytest.mark.parametrize("model", MODELS)
def test_an_upstreams_interleaved_calls_stream_item_by_item_and_are_stored_as_sent(served, model):
    body = {"model": model, "input": "w", "stream": True, "tools": [WEATHER, TIME]}
    with httpx.stream("POST", f"{served}/v1/responses", json=body, headers={"Authorization": f"Bearer {KEY}"},
                      timeout=30) as reply:
        assert reply.status_code == 200
        sent = [json.loads(line[5:]) for line in reply.iter_lines() if line.startswith("data:")]
    items = check_item_by_item(sent)
    assert [(item["call_id"], item["name"], item["arguments"]) for item in items] == CALLS
    assert langchain_calls(sent) == [("get_weather", A), ("get_time", B)]
    stored = httpx.get(f"{served}/v1/responses/{sent[-1]['response']['id']}",
                       headers={"Authorization": f"Bearer {KEY}"}, timeout=30).json()
    assert stored["output"] == items
