"""A streamed Responses reply whose chat deltas are not contiguous per item (QA37 defect 1):
parallel calls' id/name first and then their arguments, or arguments alternating between
calls, or text between calls. Every output item is added once and done once with all of
its arguments or text, its events name its own `output_index` and `item_id`, and
`response.completed` lists what the stored (whole) response lists."""
import json

import pytest

from gateway.backend import Finished, RefusalDelta, TextDelta, ToolCallDelta, Usage
from gateway.responses_format import ResponsesRequest
from gateway.responses_stream import ResponsesStreamWriter, whole_response

WEATHER = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}
REQUEST = ResponsesRequest(model="m", input="x", tools=[WEATHER])
END = Finished("tool_calls", Usage(5, 9))

CONTIGUOUS = [ToolCallDelta(0, "call_a", "get_weather", ""), ToolCallDelta(0, None, None, '{"city": "Paris"}'),
              ToolCallDelta(1, "call_b", "get_time", ""), ToolCallDelta(1, None, None, '{"tz": "CET"}'), END]
NAMES_FIRST = [ToolCallDelta(0, "call_a", "get_weather", ""), ToolCallDelta(1, "call_b", "get_time", ""),
               ToolCallDelta(0, None, None, '{"city": '), ToolCallDelta(0, None, None, '"Paris"}'),
               ToolCallDelta(1, None, None, '{"tz": "CET"}'), END]
A, B = '{"city": "Paris"}', '{"tz": "CET"}'
INTERLEAVED = ([ToolCallDelta(0, "call_a", "get_weather", A[:2]), ToolCallDelta(1, "call_b", "get_time", B[:2])]
               + [ToolCallDelta(i, None, None, text[n:n + 2]) for n in range(2, 18, 2)
                  for i, text in ((0, A), (1, B)) if text[n:n + 2]] + [END])
TEXT_BETWEEN = [TextDelta("Let me "), ToolCallDelta(0, "call_a", "get_weather", A), TextDelta("look both up."),
                ToolCallDelta(1, "call_b", "get_time", ""), ToolCallDelta(0, None, None, ""),
                ToolCallDelta(1, None, None, B), END]


def streamed(events, request=REQUEST):
    writer = ResponsesStreamWriter("resp_abc", request, created_at=1)
    raw = writer.opening() + b"".join(writer.event(event) for event in events)
    sent = [json.loads(line.removeprefix(b"data: ")) for line in raw.split(b"\n") if line.startswith(b"data: ")]
    return writer, sent


def check_items(sent):
    """Each item added once and done once, its events naming its own output_index, its
    deltas adding up to what its `.done` events carry; the items done, in order."""
    assert [event["sequence_number"] for event in sent] == list(range(len(sent)))
    added = {e["item"]["id"]: e["output_index"] for e in sent if e["type"] == "response.output_item.added"}
    done = [e for e in sent if e["type"] == "response.output_item.done"]
    assert len(added) == len([e for e in sent if e["type"] == "response.output_item.added"]) == len(done)
    assert sorted(added.values()) == list(range(len(added)))
    assert [(e["item"]["id"], e["output_index"]) for e in done] == sorted(added.items(), key=lambda kv: kv[1])
    for item_id, position in added.items():
        own = [e for e in sent if e.get("item_id") == item_id]
        assert all(e["output_index"] == position for e in own)
        [item] = [e["item"] for e in done if e["item"]["id"] == item_id]
        if item["type"] == "function_call":
            deltas = "".join(e["delta"] for e in own if e["type"] == "response.function_call_arguments.delta")
            [arguments_done] = [e for e in own if e["type"] == "response.function_call_arguments.done"]
            assert deltas == arguments_done["arguments"] == item["arguments"]
        else:
            deltas = "".join(e["delta"] for e in own if e["type"] == "response.output_text.delta")
            assert deltas == "".join(part.get("text", "") for part in item["content"])
        assert [e for e in sent if e["type"] == "response.output_item.added"
                and e["item"]["id"] == item_id][0]["output_index"] == position
    return [e["item"] for e in done]


@pytest.mark.parametrize("events", [CONTIGUOUS, NAMES_FIRST, INTERLEAVED], ids=["contiguous", "names_first",
                                                                                 "interleaved"])
def test_parallel_calls_are_one_item_each_whatever_their_deltas_order(events):
    writer, sent = streamed(events)
    items = check_items(sent)
    completed = sent[-1]
    assert completed["type"] == "response.completed"
    assert [(o["call_id"], o["name"], o["arguments"]) for o in completed["response"]["output"]] == [
        ("call_a", "get_weather", A), ("call_b", "get_time", B)]
    assert completed["response"]["output"] == items
    assert completed["response"]["output"] == whole_response("resp_abc", REQUEST, writer.collected, 1)["output"]
    assert len(completed["response"]["output"]) == 2


def test_text_between_calls_stays_one_message():
    writer, sent = streamed(TEXT_BETWEEN)
    items = check_items(sent)
    assert [item["type"] for item in items] == ["message", "function_call", "function_call"]
    assert items[0]["content"][0]["text"] == "Let me look both up."
    assert [e["type"] for e in sent].count("response.content_part.added") == 1
    assert sent[-1]["response"]["output"] == whole_response("resp_abc", REQUEST, writer.collected, 1)["output"]


def test_a_plain_text_reply_keeps_its_order():
    _, sent = streamed([TextDelta("Hel"), TextDelta("lo"), RefusalDelta("no"), Finished("stop", Usage(5, 2))])
    check_items(sent)
    assert [e["type"] for e in sent][2:] == [
        "response.output_item.added", "response.content_part.added", "response.output_text.delta",
        "response.output_text.delta", "response.output_text.done", "response.content_part.done",
        "response.content_part.added", "response.refusal.delta", "response.refusal.done",
        "response.content_part.done", "response.output_item.done", "response.completed"]


def test_calls_cut_by_the_token_limit_or_a_cancel_end_each_once():
    request = ResponsesRequest(model="m", input="x", tools=[WEATHER], max_output_tokens=9)
    cut = INTERLEAVED[:5]
    writer, sent = streamed(cut + [Finished("length", Usage(5, 9))], request)
    items = check_items(sent)
    assert [item["status"] for item in items] == ["completed", "incomplete"]
    assert sent[-1]["response"]["output"] == whole_response("resp_abc", request, writer.collected, 1)["output"]
    writer = ResponsesStreamWriter("resp_abc", REQUEST, created_at=1)
    raw = writer.opening() + b"".join(writer.event(event) for event in cut) + writer.cancelled(Usage(5, 4))
    sent = [json.loads(line.removeprefix(b"data: ")) for line in raw.split(b"\n") if line.startswith(b"data: ")]
    items = check_items(sent)
    assert sent[-1]["type"] == "response.cancelled" and sent[-1]["response"]["output"] == items
    assert [(item["arguments"], item["status"]) for item in items] == [(A[:6], "completed"), (B[:4], "incomplete")]
    assert writer.cut() == b""   # nothing is left open


@pytest.mark.parametrize("events", [
    [ToolCallDelta(0, "call_a", "get_weather", A), TextDelta("Done."), END],   # text after the call
    [TextDelta(""), ToolCallDelta(0, "call_a", "get_weather", A), END],   # an empty text delta first
    [ToolCallDelta(1, "call_b", "get_time", B), ToolCallDelta(0, "call_a", "get_weather", A), END],   # 1 before 0
], ids=["text_after_calls", "empty_text_first", "calls_out_of_index_order"])
def test_the_stored_response_lists_the_items_as_the_stream_added_them(events):
    """The stored (whole) response and `response.completed` list the same items in the
    same order: the order of their first deltas (a message only once it has text)."""
    writer, sent = streamed(events)
    check_items(sent)
    output = sent[-1]["response"]["output"]
    assert output == whole_response("resp_abc", REQUEST, writer.collected, 1)["output"]
    added = [e["item"]["id"] for e in sent if e["type"] == "response.output_item.added"]
    assert added == [item["id"] for item in output]
    assert all(item["type"] == "function_call" for item in output[:1])   # a call came first in each


@pytest.mark.parametrize("ends", ["error", "failed"])
def test_a_stream_that_fails_midway_ends_its_open_item_and_lists_its_output(ends):
    """QA125: `response.failed` listed no output, and the item a client was told was added
    never got its `output_item.done`; now as a cancel: the open item ends incomplete, as it
    stands, and the failed response (the one stored too) lists it."""
    stored = []
    writer = ResponsesStreamWriter("resp_abc", REQUEST, created_at=1, on_failed=stored.append)
    raw = writer.opening() + b"".join(writer.event(event) for event in (TextDelta("Half a "), TextDelta("reply")))
    error = {"code": "upstream_error", "message": "the upstream broke the connection"}
    raw += writer.error({"error": error}) if ends == "error" else writer.failed(error)
    sent = [json.loads(line.removeprefix(b"data: ")) for line in raw.split(b"\n") if line.startswith(b"data: ")]
    items = check_items(sent)
    assert [(item["type"], item["status"], item["content"][0]["text"]) for item in items] == [
        ("message", "incomplete", "Half a reply")]
    assert sent[-1]["type"] == "response.failed" and sent[-1]["response"]["output"] == items
    assert stored == ([sent[-1]["response"]] if ends == "error" else [])
    assert writer.cut() == b""
