"""The Responses API on upstream models (QA92 findings 2, 3, 4, 7, 8): a reply an upstream's
content filter cut is `incomplete` (`content_filter`); an `input_image`'s `detail` reaches
the upstream (a bad one, or a `file_id`, is a 400 naming it); fields the Responses API does
not know here are carried into the chat request it runs as; a foreground stream that fails
once begun ends with `response.failed` and its id reads back `failed`; a streamed call whose
name an upstream splits is added with its whole name."""
from __future__ import annotations

import json
import os

import httpx
import pytest

from gateway.app import build_app
from gateway.backend import Finished, TextDelta, ToolCallDelta, Usage
from gateway.collected import Collected
from gateway.config import key_digest, parse_config
from gateway.errors import ApiError
from gateway.responses_extras import MOVED
from gateway.responses_format import ResponsesRequest, to_chat_body
from gateway.responses_stream import ResponsesStreamWriter, whole_response
from tests.gateway import fake_openai
from tests.gateway.serving import start_server

KEY = "sk-fi14-alpha"
MODELS = ("fake", "fake-direct")   # through litellm, and passed through
IMAGE = "https://example.com/a.png"
SPLIT_NAME = ["get_", "weather"]
ARGUMENTS = ['{"city": ', '"Paris"}']


def _sse(chunk: dict) -> bytes:
    return b"data: " + json.dumps({"id": "chatcmpl-fi14", "object": "chat.completion.chunk", "created": 1,
                                   "model": "fake", **chunk}).encode() + b"\n\n"


def _delta(delta: dict, finish_reason: str | None = None) -> bytes:
    return _sse({"choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]})


USAGE = {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
# the streams this fake sends for its own words; anything else is tests/gateway/fake_openai.py's
STREAMS = {
    "filtered": [_delta({"role": "assistant", "content": "Partial "}), _delta({}, "content_filter")],
    "split-name": ([_delta({"role": "assistant", "tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                                                 "function": {"name": SPLIT_NAME[0],
                                                                              "arguments": ""}}]})]
                   + [_delta({"tool_calls": [{"index": 0, "function": {"name": SPLIT_NAME[1], "arguments": ""}}]})]
                   + [_delta({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
                      for piece in ARGUMENTS]
                   + [_delta({}, "tool_calls")]),
}


def fake_app(seen: list[dict]):
    """An upstream that records each request body in `seen`: "filtered" is a reply its
    content filter cut, "split-name" streams a call whose name comes in two deltas."""
    async def app(scope, receive, send):
        raw = await fake_openai.request_body(scope, receive, send)
        if raw is None:
            return
        body = json.loads(raw or b"{}")
        seen.append(body)
        text = body["messages"][-1]["content"] if body.get("messages") else None
        if not isinstance(text, str) or text not in STREAMS:
            async def again():
                return {"type": "http.request", "body": raw, "more_body": False}
            await fake_openai.app(scope, again, send)
        elif not body.get("stream"):
            await fake_openai.send_json(send, 200, {
                "id": "x", "object": "chat.completion", "created": 1, "model": "fake", "usage": USAGE,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "Partial"},
                             "finish_reason": "content_filter"}]})
        else:
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"text/event-stream")]})
            body = b"".join(STREAMS[text]) + _sse({"choices": [], "usage": USAGE}) + b"data: [DONE]\n\n"
            await send({"type": "http.response.body", "body": body})
    return app


def gateway_over(upstream_url: str, folder, key: str):
    """A served gateway (to stop) whose models are MODELS on the upstream at `upstream_url`
    (through litellm, and passed through), tenant "alpha" with `key`, its state in `folder`."""
    os.environ["STEPAHEAD_TEST_FAKE_KEY"] = "sk-upstream-secret"
    models = [{"name": name, "kind": "upstream", "litellm_model": "openai/fake-model",
               "api_base": f"{upstream_url}/v1", "api_key_env": "STEPAHEAD_TEST_FAKE_KEY",
               "passthrough": name == "fake-direct"} for name in MODELS]
    config = parse_config({"server": {"responses_db": str(folder / "responses.sqlite3")}, "models": models,
                           "tenants": [{"name": "alpha", "api_key_sha256": [key_digest(key)]}],
                           "tracing": {"store_path": str(folder / "traces.sqlite3")}})
    return start_server(build_app(config))


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A gateway with upstream models only (fast to start), its own state files, and the
    request bodies its upstream got."""
    seen: list[dict] = []
    upstream = start_server(fake_app(seen))
    server = gateway_over(upstream.base_url, tmp_path_factory.mktemp("fi14"), KEY)
    yield server.base_url, seen
    server.stop()
    upstream.stop()


def _post(base_url: str, body: dict) -> httpx.Response:
    return httpx.post(f"{base_url}/v1/responses", json=body, headers={"Authorization": f"Bearer {KEY}"},
                      timeout=30)


def _stream(base_url: str, body: dict) -> list[dict]:
    with httpx.stream("POST", f"{base_url}/v1/responses", json={**body, "stream": True},
                      headers={"Authorization": f"Bearer {KEY}"}, timeout=30) as reply:
        assert reply.status_code == 200
        return [json.loads(line[5:]) for line in reply.iter_lines() if line.startswith("data:")]


# 1. content_filter


@pytest.mark.parametrize("model", MODELS)
def test_a_reply_the_upstreams_content_filter_cut_is_incomplete_streamed_or_not(served, model):
    base_url, _ = served
    whole = _post(base_url, {"model": model, "input": "filtered"}).json()
    assert (whole["status"], whole["incomplete_details"]) == ("incomplete", {"reason": "content_filter"})
    assert whole["output"][-1]["status"] == "incomplete" and whole["completed_at"] is None
    events = _stream(base_url, {"model": model, "input": "filtered"})
    assert events[-1]["type"] == "response.incomplete"
    assert events[-1]["response"]["incomplete_details"] == {"reason": "content_filter"}
    [done] = [event["item"] for event in events if event["type"] == "response.output_item.done"]
    assert done["status"] == "incomplete" and done["content"][0]["text"] == "Partial "


def _collected(finish_reason: str, *, call: bool = False) -> Collected:
    collected = Collected()
    collected.add(TextDelta("Partial"))
    if call:
        collected.add(ToolCallDelta(0, "call_1", "f", "{}"))
    collected.add(Finished(finish_reason, Usage(num_prompt_tokens=3, num_completion_tokens=2)))
    return collected


@pytest.mark.parametrize("finish_reason, call, status, reason", [
    ("content_filter", False, "incomplete", "content_filter"),
    ("content_filter", True, "incomplete", "content_filter"),   # cut while calling: the call may be cut
    ("length", False, "incomplete", "max_output_tokens"),
    ("stop", False, "completed", None),
])
def test_incomplete_details_says_why_the_reply_stopped_short(finish_reason, call, status, reason):
    request = ResponsesRequest(model="m", input="hi")
    whole = whole_response("resp_x", request, _collected(finish_reason, call=call), 1)
    assert whole["status"] == status and whole["output"][-1]["status"] == status
    assert whole["incomplete_details"] == (None if reason is None else {"reason": reason})
    writer = ResponsesStreamWriter("resp_x", request, 1)
    writer.opening()
    for event in (TextDelta("Partial"), *([ToolCallDelta(0, "call_1", "f", "{}")] if call else []),
                  Finished(finish_reason, Usage())):
        last = writer.event(event)
    final = json.loads(last.rsplit(b"data: ", 1)[1])
    assert final["type"] == f"response.{status}" and final["response"]["incomplete_details"] == whole[
        "incomplete_details"]


# 2. input_image detail, file_id


def _image_request(part: dict) -> ResponsesRequest:
    return ResponsesRequest(model="m", input=[{"role": "user", "content": [
        {"type": "input_text", "text": "what is it?"}, {"type": "input_image", **part}]}])


@pytest.mark.parametrize("detail", ["low", "high", "auto"])
def test_an_input_images_detail_is_the_chat_parts(detail):
    body = to_chat_body(_image_request({"image_url": IMAGE, "detail": detail}))
    assert body["messages"][0]["content"][1] == {"type": "image_url", "image_url": {"url": IMAGE, "detail": detail}}


def test_an_input_image_without_detail_is_the_url_alone():
    for part in ({"image_url": IMAGE}, {"image_url": IMAGE, "detail": None, "file_id": None}):
        assert to_chat_body(_image_request(part))["messages"][0]["content"][1]["image_url"] == {"url": IMAGE}


@pytest.mark.parametrize("part, param, code", [
    ({"image_url": IMAGE, "detail": "medium"}, "input[0].content[1].detail", "invalid_value"),
    ({"image_url": IMAGE, "detail": 1}, "input[0].content[1].detail", "invalid_value"),
    ({"file_id": "file-abc", "detail": "low"}, "input[0].content[1].file_id", "unsupported_parameter"),
    ({"file_id": "file-abc", "image_url": IMAGE, "detail": "auto"}, "input[0].content[1].file_id",
     "unsupported_parameter"),
])
def test_a_bad_detail_or_a_file_id_is_a_400_naming_it(part, param, code):
    with pytest.raises(ApiError) as caught:
        to_chat_body(_image_request(part))
    assert (caught.value.status, caught.value.param, caught.value.code) == (400, param, code)


@pytest.mark.parametrize("model", MODELS)
def test_the_upstream_gets_the_images_detail(served, model):
    base_url, seen = served
    reply = _post(base_url, {"model": model, "input": [{"role": "user", "content": [
        {"type": "input_text", "text": "look"}, {"type": "input_image", "image_url": IMAGE, "detail": "low"}]}]})
    assert reply.status_code == 200, reply.text
    assert seen[-1]["messages"][-1]["content"][1] == {"type": "image_url",
                                                      "image_url": {"url": IMAGE, "detail": "low"}}


# 3. fields the Responses API does not know here


EXTRAS = {"seed": 7, "stop": ["x"], "top_k": 3, "my_vendor_flag": True}


def test_unknown_fields_are_the_chat_requests_own():
    body = to_chat_body(ResponsesRequest.model_validate({"model": "m", "input": "hi", **EXTRAS}))
    assert {name: body[name] for name in EXTRAS} == EXTRAS


def test_a_request_of_responses_parameters_only_carries_nothing_more():
    request = {"model": "m", "input": "hi", "instructions": "be brief", "max_output_tokens": 9, "temperature": 0.5,
               "top_p": 0.9, "metadata": {"a": "b"}, "user": "u", "store": True, "stream": True,
               "text": {"format": {"type": "json_object"}}, "top_logprobs": 2, "service_tier": "auto",
               "include": ["message.output_text.logprobs"],
               "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
               "tool_choice": "auto", "parallel_tool_calls": False, "reasoning": {"effort": "low"},
               "prompt_cache_key": "k", "safety_identifier": "s", "truncation": "auto", "max_tool_calls": 2}
    body = to_chat_body(ResponsesRequest.model_validate(request))
    assert sorted(body) == sorted(["model", "messages", "stream", "tools", "tool_choice", "parallel_tool_calls",
                                   "response_format", "max_completion_tokens", "temperature", "top_p", "metadata",
                                   "user", "logprobs", "top_logprobs", "service_tier"])
    # every chat parameter it builds is a Responses parameter, or one a request may not send as it is
    assert set(body) <= set(ResponsesRequest.model_fields) | set(MOVED)


@pytest.mark.parametrize("field, value, says", [
    ("messages", [{"role": "user", "content": "hi"}], "'input'"),
    ("response_format", {"type": "json_object"}, "'text.format'"),
    ("max_completion_tokens", 5, "'max_output_tokens'"),
    ("max_tokens", 5, "'max_output_tokens'"),
    ("logprobs", True, "'include'"),
    ("reasoning_effort", "low", "'reasoning.effort'"),   # QA98: sent upstream beside the echoed reasoning
    ("verbosity", "low", "'text.verbosity'"),
    ("n", 2, "one output"),
])
def test_a_chat_parameter_the_responses_api_spells_its_own_way_is_a_400_naming_it(field, value, says):
    with pytest.raises(ApiError) as caught:
        to_chat_body(ResponsesRequest.model_validate({"model": "m", "input": "hi", field: value}))
    assert (caught.value.status, caught.value.param, caught.value.code) == (400, field, "unsupported_parameter")
    assert says in caught.value.message


def test_null_moved_parameters_and_n_1_are_accepted():
    body = to_chat_body(ResponsesRequest.model_validate({"model": "m", "input": "hi", "messages": None,
                                                         "response_format": None, "n": 1}))
    assert body["messages"] == [{"role": "user", "content": "hi"}] and body["n"] == 1
    assert "response_format" not in body


@pytest.mark.parametrize("model", MODELS)
def test_the_upstream_receives_unknown_fields_as_chat_sends_them(served, model):
    base_url, seen = served
    assert _post(base_url, {"model": model, "input": "hi", **EXTRAS}).status_code == 200
    assert {name: seen[-1].get(name) for name in EXTRAS} == EXTRAS


def test_a_local_model_applies_chats_rules_to_unknown_fields(gateway):
    url, headers = f"{gateway.base_url}/v1/responses", gateway.headers("alpha")
    body = {"model": "tiny", "input": "hi", "max_output_tokens": 2}
    refused = httpx.post(url, json={**body, "audio": {"voice": "alloy", "format": "wav"}}, headers=headers)
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "audio", refused.text
    assert httpx.post(url, json={**body, "my_vendor_flag": True}, headers=headers).status_code == 200
    wrong_type = httpx.post(url, json={**body, "seed": "7"}, headers=headers)
    assert wrong_type.status_code == 400 and wrong_type.json()["error"]["param"] == "seed", wrong_type.text


# 4. a foreground stream that fails once begun


@pytest.mark.parametrize("model", MODELS)
def test_a_failed_foreground_stream_ends_failed_and_is_stored_failed(served, model):
    base_url, _ = served
    events = _stream(base_url, {"model": model, "input": "midstream-error"})
    assert events[0]["type"] == "response.created" and events[-1]["type"] == "response.failed"
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    failed = events[-1]["response"]
    assert failed["status"] == "failed" and failed["error"]["code"] and failed["error"]["message"]
    stored = httpx.get(f"{base_url}/v1/responses/{failed['id']}", headers={"Authorization": f"Bearer {KEY}"})
    assert stored.status_code == 200 and stored.json()["status"] == "failed"
    assert stored.json()["error"] == failed["error"] and stored.json()["background"] is False
    continued = _post(base_url, {"model": model, "input": "hi", "previous_response_id": failed["id"]})
    assert continued.status_code == 400 and continued.json()["error"]["param"] == "previous_response_id"


def test_a_failed_background_response_is_stored_with_the_output_it_had_made(served):
    """QA128: a background run that failed midway was stored with `output: []` while its
    `response.failed` event listed the output so far (the open item ended incomplete)."""
    import time

    base_url, _ = served
    first = _stream(base_url, {"model": "fake", "input": "midstream-error", "background": True})[0]
    url, headers = f"{base_url}/v1/responses/{first['response']['id']}", {"Authorization": f"Bearer {KEY}"}
    deadline = time.monotonic() + 20
    while (stored := httpx.get(url, headers=headers).json())["status"] in ("queued", "in_progress"):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    with httpx.stream("GET", url, params={"stream": "true"}, headers=headers, timeout=30) as reply:
        events = [json.loads(line[5:]) for line in reply.iter_lines() if line.startswith("data:")]
    assert stored["status"] == "failed" and events[-1]["type"] == "response.failed"
    assert stored["output"] == events[-1]["response"]["output"] != []
    assert stored["output"][-1]["status"] == "incomplete"


def test_a_failed_stream_that_is_not_stored_still_ends_failed(served):
    base_url, _ = served
    events = _stream(base_url, {"model": "fake-direct", "input": "midstream-error", "store": False})
    assert events[-1]["type"] == "response.failed"
    gone = httpx.get(f"{base_url}/v1/responses/{events[0]['response']['id']}",
                     headers={"Authorization": f"Bearer {KEY}"})
    assert gone.status_code == 404


def test_a_stream_the_shutdown_cut_still_ends_with_an_error_event_and_is_not_stored():
    kept = []
    writer = ResponsesStreamWriter("resp_x", ResponsesRequest(model="m", input="hi"), 1, on_failed=kept.append)
    writer.opening()
    writer.event(TextDelta("Hel"))
    cut = json.loads(writer.error({"error": {"message": "cut", "code": "server_shutting_down"}})[len(
        b"event: error\ndata: "):])
    assert cut["type"] == "error" and cut["code"] == "server_shutting_down" and kept == []
    failed = writer.error({"error": {"message": "boom", "type": "server_error", "code": None}})
    assert kept and kept[0]["status"] == "failed" and kept[0]["error"] == {"code": "server_error", "message": "boom"}
    assert b"event: response.failed\n" in failed


# 5. a call's name split over deltas


@pytest.mark.parametrize("model", MODELS)
def test_a_streamed_call_whose_name_an_upstream_splits_is_added_with_its_whole_name(served, model):
    base_url, _ = served
    events = _stream(base_url, {"model": model, "input": "split-name",
                                "tools": [{"type": "function", "name": "get_weather",
                                           "parameters": {"type": "object"}}]})
    [added] = [event["item"] for event in events if event["type"] == "response.output_item.added"]
    [done] = [event["item"] for event in events if event["type"] == "response.output_item.done"]
    assert added["name"] == done["name"] == "get_weather" and done["arguments"] == "".join(ARGUMENTS)
    assert events[-1]["response"]["output"][0]["name"] == "get_weather"
    kinds = [event["type"] for event in events]
    assert kinds.index("response.output_item.added") < kinds.index("response.function_call_arguments.delta")


def _stream_bytes(events: list) -> bytes:
    writer = ResponsesStreamWriter("resp_x", ResponsesRequest(model="m", input="hi"), 1)
    return writer.opening() + b"".join(writer.event(event) for event in events)


def test_a_held_call_is_added_before_the_next_other_event_and_the_stream_stays_whole():
    # a name alone, then another call: the first is added (whole name so far) before the second
    events = [ToolCallDelta(0, "c0", "get_", ""), ToolCallDelta(0, None, "weather", ""),
              ToolCallDelta(1, "c1", "lookup", ""), TextDelta("then"), ToolCallDelta(1, None, None, "{}"),
              Finished("tool_calls", Usage())]
    out = [json.loads(line[6:]) for line in _stream_bytes(events).split(b"\n") if line.startswith(b"data: ")]
    added = [(e["output_index"], e["item"]["name"]) for e in out if e["type"] == "response.output_item.added"
             and e["item"]["type"] == "function_call"]
    assert added == [(0, "get_weather"), (1, "lookup")]
    assert [e["sequence_number"] for e in out] == list(range(len(out)))
    assert [item["name"] for item in out[-1]["response"]["output"] if item["type"] == "function_call"] == [
        "get_weather", "lookup"]
    # a reply of one call that never got arguments is still that call, not an empty message
    only = [json.loads(line[6:]) for line in _stream_bytes([ToolCallDelta(0, "c0", "f", ""), Finished(
        "tool_calls", Usage())]).split(b"\n") if line.startswith(b"data: ")]
    assert [item["type"] for item in only[-1]["response"]["output"]] == ["function_call"]


def test_a_local_models_call_stream_keeps_its_events_and_their_order():
    """The local model's shape (the whole name in the call's first delta, its arguments in
    the next): the call is added, with its name, once the message before it is done, right
    before its first arguments (each item's events contiguous, as OpenAI's are: QA159)."""
    events = [TextDelta("Let me look."), ToolCallDelta(0, "call_a", "lookup", ""),
              ToolCallDelta(0, None, None, '{"q": "x"}'), Finished("tool_calls", Usage())]
    out = [json.loads(line[6:]) for line in _stream_bytes(events).split(b"\n") if line.startswith(b"data: ")]
    assert [event["type"] for event in out] == [
        "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.done", "response.content_part.done",
        "response.output_item.done", "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done", "response.completed"]
    assert out[8]["item"] == {"type": "function_call", "id": "fc_x_out0", "call_id": "call_a", "name": "lookup",
                              "arguments": "", "status": "in_progress"}



def test_parallel_calls_whose_name_pieces_interleave_are_each_added_with_their_whole_names():
    """QA98: an upstream interleaving two calls' name pieces got `get_wea` and `get_t` added."""
    from gateway.backend import Finished, ToolCallDelta, Usage
    from gateway.responses_format import ResponsesRequest
    from gateway.responses_stream import ResponsesStreamWriter

    writer = ResponsesStreamWriter("resp_x", ResponsesRequest(model="m", input="x"), created_at=1)
    pieces = [ToolCallDelta(0, "call_a", "get_wea"), ToolCallDelta(1, "call_b", "get_t"),
              ToolCallDelta(0, None, "ther"), ToolCallDelta(1, None, "ime"),
              ToolCallDelta(0, None, None, "{}"), ToolCallDelta(1, None, None, "{}"),
              Finished("tool_calls", Usage(5, 4))]
    streamed = b"".join(writer.event(piece) for piece in pieces)
    events = [json.loads(line.removeprefix(b"data: ")) for line in streamed.split(b"\n") if line.startswith(b"data: ")]
    added = [(e["output_index"], e["item"]["name"]) for e in events if e["type"] == "response.output_item.added"]
    assert added == [(0, "get_weather"), (1, "get_time")]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
