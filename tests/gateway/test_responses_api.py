"""The Responses API (`/v1/responses`) through the official client, on the tiny model."""
import json

import httpx
import openai
import pytest

from gateway.backend import Finished, TextDelta, ToolCallDelta, Usage
from gateway.errors import ApiError
from gateway.collected import Collected
from gateway.responses_errors import renamed
from gateway.responses_format import ResponsesRequest, conversation_after, to_chat_body
from gateway.responses_input import input_messages
from gateway.schemas import ChatCompletionRequest, validate
from gateway.responses_stream import ResponsesStreamWriter, whole_response
from tests.gateway.conftest import KEYS

WEATHER = {"type": "function", "name": "get_weather", "description": "Weather for a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


@pytest.fixture(scope="module")
def client(gateway):
    return openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=KEYS["alpha"], max_retries=0)


def test_input_items_become_chat_messages():
    items = [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
             {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
             {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{\"a\": 1}"},
             {"type": "reasoning", "summary": []},
             {"type": "function_call_output", "call_id": "c1", "output": "one"},
             {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]}]
    assert input_messages(items) == [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{\"a\": 1}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "one"},
        {"role": "assistant", "content": [{"type": "text", "text": "ok"}]}]
    assert input_messages("hello") == [{"role": "user", "content": "hello"}]


def test_request_becomes_a_chat_body_after_the_stored_conversation():
    request = ResponsesRequest(model="m", input="next", instructions="be brief", tools=[WEATHER],
                               tool_choice={"type": "function", "name": "get_weather"}, max_output_tokens=9,
                               text={"format": {"type": "json_schema", "name": "n", "schema": {"type": "object"}}})
    history = ({"role": "user", "content": "first"}, {"role": "assistant", "content": "reply"})
    body = to_chat_body(request, history)
    assert [m["content"] for m in body["messages"]] == ["be brief", "first", "reply", "next"]
    assert body["tools"] == [{"type": "function", "function": {k: WEATHER[k] for k in ("name", "description",
                                                                                      "parameters")}}]
    assert body["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert body["response_format"] == {"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "object"}}}
    assert body["max_completion_tokens"] == 9 and body["stream"] is False
    error = renamed(ApiError(400, "x", param="tools[0].function.parameters"))
    assert error.param == "tools[0].parameters"
    assert renamed(ApiError(400, "x", param="messages[2].content")).param == "input[2].content"
    error = renamed(ApiError(400, "Invalid request at 'messages': List should have at least 1 item",
                             param="messages"))
    assert error.param == "input" and error.message.startswith("Invalid request at 'input': ")


def test_an_empty_reply_can_be_continued_with_previous_response_id():
    first = ResponsesRequest(model="m", input="Say nothing.")
    empty = Collected()
    empty.add(Finished("stop", Usage(5, 1)))   # the model ended at once: no text, no calls
    history = conversation_after(first, to_chat_body(first), empty)
    assert history[-1] == {"role": "assistant", "content": ""}
    follow_up = to_chat_body(ResponsesRequest(model="m", input="And now?"), history)
    parsed = validate(ChatCompletionRequest, follow_up)   # a 400 before: content None alone
    assert [m.role for m in parsed.messages] == ["user", "assistant", "user"]


def _ran_out_of_tokens_in(events, request):
    """The whole and the streamed response after `events`, which end out of tokens."""
    writer = ResponsesStreamWriter("resp_x", request, created_at=1)
    streamed = b"".join(writer.event(e) for e in events)
    last = json.loads(streamed.rstrip().split(b"\n")[-1].removeprefix(b"data: "))
    return whole_response("resp_x", request, writer.collected, created_at=1), last


def test_the_item_being_written_when_tokens_ran_out_is_incomplete():
    request = ResponsesRequest(model="m", input="x", max_output_tokens=3)
    text = [TextDelta("Hello th"), Finished("length", Usage(5, 3))]
    whole, last = _ran_out_of_tokens_in(text, request)
    assert whole["status"] == "incomplete" and last["type"] == "response.incomplete"
    for response in (whole, last["response"]):
        [item] = response["output"]
        assert item["status"] == "incomplete" and item["content"][0]["text"] == "Hello th"
    done = [TextDelta("Hi."), Finished("stop", Usage(5, 2))]
    whole, last = _ran_out_of_tokens_in(done, request)
    assert whole["output"][0]["status"] == "completed" == last["response"]["output"][0]["status"]


def test_a_call_being_written_when_tokens_ran_out_is_incomplete():
    request = ResponsesRequest(model="m", input="x", tools=[WEATHER], max_output_tokens=9)
    events = [TextDelta("Let me look."), ToolCallDelta(0, "call_1", "get_weather", ""),
              ToolCallDelta(0, None, None, '{"city": "Pa'), Finished("length", Usage(5, 9))]
    whole, last = _ran_out_of_tokens_in(events, request)
    assert whole["status"] == "incomplete" and last["type"] == "response.incomplete"
    for response in (whole, last["response"]):
        message, call = response["output"]
        assert message["status"] == "completed" and call["type"] == "function_call"
        assert call["status"] == "incomplete" and call["arguments"] == '{"city": "Pa'
        assert response["incomplete_details"] == {"reason": "max_output_tokens"}


def test_responses_whole_reply_and_retrieval(client, gateway):
    reply = client.responses.create(model="tiny", input="Hi there", instructions="Be terse.",
                                    max_output_tokens=8, temperature=0)
    assert reply.id.startswith("resp_") and reply.object == "response" and reply.model == "tiny"
    assert reply.status in ("completed", "incomplete") and reply.output[0].type == "message"
    assert reply.output_text == reply.output[0].content[0].text
    assert reply.usage.output_tokens <= 8 and reply.usage.input_tokens > 0
    assert (reply.completed_at is not None) == (reply.status == "completed")
    echoed = client.responses.create(model="tiny", input="Hi", max_output_tokens=2, prompt_cache_key="agent-7",
                                     safety_identifier="user-1", max_tool_calls=3)
    assert (echoed.prompt_cache_key, echoed.safety_identifier, echoed.max_tool_calls) == ("agent-7", "user-1", 3)
    assert client.responses.retrieve(reply.id).output_text == reply.output_text
    url = f"{gateway.base_url}/v1/responses/{reply.id}"
    other = httpx.get(url, headers=gateway.headers("beta"))
    assert other.status_code == 404 and other.json()["error"]["code"] == "response_not_found"
    assert httpx.delete(url, headers=gateway.headers("beta")).status_code == 404  # nor can it delete it
    client.responses.delete(reply.id)
    assert httpx.get(url, headers=gateway.headers("alpha")).status_code == 404


def test_responses_stream_events_in_order_and_numbered(client):
    events = list(client.responses.create(model="tiny", input="Hi", max_output_tokens=6, stream=True))
    kinds = [event.type for event in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] in ("response.completed", "response.incomplete")
    assert [event.sequence_number for event in events] == list(range(len(events)))
    deltas = "".join(event.delta for event in events if event.type == "response.output_text.delta")
    assert deltas == events[-1].response.output_text
    assert kinds.index("response.output_item.added") < kinds.index("response.output_item.done")


def test_responses_tool_turn_then_previous_response_id_continues_from_the_cache(client):
    first = client.responses.create(model="tiny", input="Weather in Oslo?", tools=[WEATHER],
                                    tool_choice="required", max_output_tokens=40, temperature=0)
    [call] = [item for item in first.output if item.type == "function_call"]
    assert call.name == "get_weather" and set(json.loads(call.arguments)) == {"city"}
    second = client.responses.create(model="tiny", previous_response_id=first.id, tools=[WEATHER],
                                     input=[{"type": "function_call_output", "call_id": call.call_id,
                                             "output": "12 C"}], max_output_tokens=4, temperature=0)
    assert second.previous_response_id == first.id
    # the second turn re-sends the first one's conversation: its prompt comes from the cache
    assert second.usage.input_tokens > first.usage.input_tokens
    assert second.usage.input_tokens_details.cached_tokens > 0


def test_responses_json_schema_text_format(client):
    schema = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
              "required": ["city", "days"], "additionalProperties": False}
    reply = client.responses.create(model="tiny", input="Forecast as JSON.", max_output_tokens=40,
                                    text={"format": {"type": "json_schema", "name": "f", "schema": schema,
                                                     "strict": True}})
    value = json.loads(reply.output_text)
    assert set(value) == {"city", "days"} and isinstance(value["days"], int)


@pytest.mark.parametrize("body,status,param", [
    ({"input": "x", "previous_response_id": "resp_unknown"}, 404, "previous_response_id"),
    ({"input": "x", "tools": [{"type": "web_search"}]}, 400, "tools[0].type"),
    ({"input": [{"type": "computer_call"}]}, 400, "input[0]"),
    ({"input": [{"role": "robot", "content": "x"}]}, 400, "input[0].role"),
    ({"input": [{"role": "user", "content": [{"type": "input_audio"}]}]}, 400, "input[0].content[0]"),
    ({"input": "x", "max_output_tokens": 0}, 400, "max_output_tokens"),
    ({"input": "x", "include": ["message.output_text.logprobs", "bogus"]}, 400, "include[1]"),
    ({"input": "x", "top_logprobs": 21}, 400, "top_logprobs"),
    ({"input": "x", "include": ["message.output_text.logprobs"], "tools": [WEATHER]}, 400, "include"),
    ({"input": "x", "text": {"format": {"type": "json_schema", "name": "bad name", "schema": {}}}}, 400,
     "text.format.name"),
    ({"input": "x", "text": {"format": ["json_schema"]}}, 400, "text.format"),
    ({"input": "x", "text": {"format": 1.5}}, 400, "text.format"),
    ({"input": "x", "conversation": "conv_123"}, 404, "conversation"),
    ({"input": "x", "conversation": {"id": 5}}, 400, "conversation.id"),
    ({"input": "x", "conversation": 5}, 400, "conversation"),
    ({"input": "x", "prompt": {"id": "pmpt_1"}}, 400, "prompt"),
    ({"instructions": "sys", "input": [{"role": "user", "content": "x"},
                                       {"type": "function_call_output", "call_id": "zz", "output": "r"}]},
     400, "input[1].call_id"),
    ({"input": [{"type": "reasoning", "summary": []}, {"role": "user", "content": "x"},
                {"type": "function_call_output", "call_id": "zz", "output": "r"}]}, 400, "input[2].call_id"),
    ({"instructions": "sys", "input": [{"role": "user", "content": "x"}, {"role": "user", "content": [
        {"type": "input_image", "image_url": "http://x/y.png"}]}]}, 400, "input[1].content"),
    ({"instructions": "sys", "input": [
        {"type": "function_call", "call_id": "a", "name": "f", "arguments": "{}"},
        {"type": "function_call", "call_id": "b", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "a", "output": "r"},
        {"type": "function_call_output", "call_id": "c", "output": "r"}]}, 400, "input[3].call_id"),
    ({"input": [{"role": "user", "content": "x", "id": "msg_a"}, {"role": "user", "content": "y", "id": "msg_a"}]},
     400, "input[1].id"),
    ({"input": [{"role": "user", "content": "x", "id": 5}]}, 400, "input[0].id"),
    ({"input": [{"role": "user", "content": "x", "id": ""}]}, 400, "input[0].id"),
    ({"input": "x", "metadata": {f"k{n}": "v" for n in range(17)}}, 400, "metadata"),
    ({"input": [{"role": "user", "content": "x"}, {"type": "function_call", "name": "f", "arguments": "{}"}]},
     400, "input[1].call_id"),
    ({"input": [{"role": "user", "content": "x"}, {"type": "function_call", "call_id": "a", "name": "f",
                                                   "arguments": "{}"},
                {"type": "reasoning", "summary": []}, {"type": "function_call", "name": "f", "arguments": "{}"}]},
     400, "input[3].call_id"),
    ({"input": [{"type": "function_call", "call_id": "a", "name": "f", "arguments": {"a": 1}}]},
     400, "input[0].arguments"),
])
def test_responses_bad_requests_are_openai_shaped_errors(gateway, body, status, param):
    reply = httpx.post(f"{gateway.base_url}/v1/responses", headers=gateway.headers("alpha"),
                       json={"model": "tiny", **body})
    assert reply.status_code == status and reply.json()["error"]["param"] == param
    assert "messages[" not in reply.json()["error"]["message"]
    assert "tool_call_id" not in reply.json()["error"]["message"] + param


def test_an_error_names_responses_parameters_in_its_message_too(gateway):
    reply = httpx.post(f"{gateway.base_url}/v1/responses", headers=gateway.headers("alpha"),
                       json={"model": "tiny", "input": "hi", "text": {"format": {"type": "json_object"}}})
    error = reply.json()["error"]
    assert reply.status_code == 400 and error["param"] == "input"
    assert "'text.format'" in error["message"] and "response_format" not in error["message"]


def test_an_input_item_whose_id_is_null_is_listed_with_a_new_one(client):
    reply = client.responses.create(model="tiny", max_output_tokens=2, input=[
        {"type": "message", "role": "user", "content": "hi", "id": None}])
    [item] = client.responses.input_items.list(reply.id).data
    assert item.id == f"msg_{reply.id.removeprefix('resp_')}_0"


def test_an_error_in_a_conversations_items_names_the_conversation(gateway):
    headers = gateway.headers("alpha")
    conversation = httpx.post(f"{gateway.base_url}/v1/conversations", headers=headers, json={"items": [
        {"role": "user", "content": [{"type": "input_image", "image_url": "http://x/y.png"}]}]}).json()
    reply = httpx.post(f"{gateway.base_url}/v1/responses", headers=headers,
                       json={"model": "tiny", "input": "hi", "conversation": conversation["id"]})
    error = reply.json()["error"]
    assert reply.status_code == 400 and error["param"] == "conversation"
    assert "'input_image'" in error["message"]


def test_responses_store_false_keeps_nothing_and_tenants_do_not_share(client, gateway):
    reply = client.responses.create(model="tiny", input="Hi", max_output_tokens=2, store=False)
    assert httpx.get(f"{gateway.base_url}/v1/responses/{reply.id}", headers=gateway.headers("alpha")).status_code == 404
    kept = client.responses.create(model="tiny", input="Hi", max_output_tokens=2)
    beta = httpx.post(f"{gateway.base_url}/v1/responses", headers=gateway.headers("beta"),
                      json={"model": "tiny", "input": "x", "previous_response_id": kept.id})
    assert beta.status_code == 404


def test_responses_stream_of_a_forced_tool_call(client):
    events = list(client.responses.create(model="tiny", input="Weather in Oslo?", tools=[WEATHER],
                                          tool_choice={"type": "function", "name": "get_weather"},
                                          max_output_tokens=40, stream=True))
    kinds = [event.type for event in events]
    assert "response.function_call_arguments.done" in kinds and kinds[-1] == "response.completed"
    added = next(event for event in events if event.type == "response.output_item.added")
    assert added.item.type == "function_call" and added.item.name == "get_weather"
    arguments = "".join(event.delta for event in events if event.type == "response.function_call_arguments.delta")
    [call] = events[-1].response.output
    assert call.arguments == arguments and call.call_id == added.item.call_id


def test_responses_on_an_upstream_model_run_as_its_chat_completions(client):
    reply = client.responses.create(model="fake", input="ping")
    assert reply.output_text == "echo: ping" and reply.usage.input_tokens_details.cached_tokens == 2
    events = list(client.responses.create(model="fake", input="ping pong", stream=True))
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta").split() == [
        "echo:", "ping", "pong"]


def test_stored_responses_survive_a_gateway_restart(tmp_path):
    from gateway.app import build_app
    from gateway.config import key_digest, parse_config
    from tests.gateway.serving import start_server

    config = parse_config({
        "server": {"responses_db": str(tmp_path / "responses.sqlite3")},
        "models": [{"name": "mock", "kind": "upstream", "litellm_model": "openai/gpt-4o-mini",
                    "litellm_params": {"mock_response": "Hello from the mock upstream"}}],
        "tenants": [{"name": "t", "api_key_sha256": [key_digest("sk-restart")]}]})

    def serve():
        server = start_server(build_app(config))
        return server, openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="sk-restart", max_retries=0)

    server, client = serve()
    first = client.responses.create(model="mock", input="Remember the word 'heron'.")
    server.stop()
    server, client = serve()  # a new process would see the same file
    try:
        assert client.responses.retrieve(first.id).output_text == first.output_text
        assert client.responses.input_items.list(first.id).data[0].content[0].text == "Remember the word 'heron'."
        second = client.responses.create(model="mock", input="Which word?", previous_response_id=first.id)
        assert second.output_text == "Hello from the mock upstream"
        client.responses.delete(first.id)
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(first.id)
    finally:
        server.stop()


def test_input_items_are_listed_with_ids_and_parts():
    from gateway.responses_objects import input_items
    as_text = input_items(ResponsesRequest(model="m", input="Hi"), "resp_abc")
    assert as_text == ({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}],
                        "id": "msg_abc_0", "status": "completed"},)
    listed = input_items(ResponsesRequest(model="m", input=[
        {"role": "assistant", "content": "Hello", "id": "msg_mine"},
        {"type": "function_call_output", "call_id": "c1", "output": "42"}]), "resp_abc")
    assert listed[0]["id"] == "msg_mine" and listed[0]["content"] == [{"type": "output_text", "text": "Hello",
                                                                        "annotations": []}]
    assert listed[1] == {"type": "function_call_output", "call_id": "c1", "output": "42", "id": "fco_abc_1",
                         "status": "completed"}


def test_a_stored_responses_input_items_are_listed_for_its_tenant_only(client, gateway):
    reply = client.responses.create(model="tiny", max_output_tokens=2, input=[
        {"role": "user", "content": "first"}, {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "second"}])
    page = client.responses.input_items.list(reply.id, order="asc", limit=2)
    assert [item.content[0].text for item in page.data] == ["first", "ok"] and page.has_more
    newest = client.responses.input_items.list(reply.id)
    assert [item.content[0].text for item in newest.data] == ["second", "ok", "first"]
    url = f"{gateway.base_url}/v1/responses/{reply.id}/input_items"
    assert httpx.get(url, headers=gateway.headers("beta")).status_code == 404
    bad = httpx.get(url, params={"limit": 500}, headers=gateway.headers("alpha"))
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "limit"
    for query, param in ((("include[]", "bogus"),), "include[]"), ((("include", "bogus"),), "include"), \
                        ((("before", newest.data[0].id),), "before"):
        bad = httpx.get(url, params=query, headers=gateway.headers("alpha"))
        assert bad.status_code == 400 and bad.json()["error"]["param"] == param
    listed = httpx.get(url, params={"include[]": "message.output_text.logprobs"}, headers=gateway.headers("alpha"))
    assert listed.status_code == 200


def test_include_logprobs_becomes_chat_logprobs():
    asked = to_chat_body(ResponsesRequest(model="m", input="x", include=["message.output_text.logprobs"],
                                          top_logprobs=3))
    assert asked["logprobs"] is True and asked["top_logprobs"] == 3
    for alone in (0, 5):   # QA209 F2: as at OpenAI, top_logprobs alone asks for no logprobs
        assert not {"logprobs", "top_logprobs"} & set(to_chat_body(ResponsesRequest(model="m", input="x",
                                                                                     top_logprobs=alone)))
    plain = to_chat_body(ResponsesRequest(model="m", input="x", include=["reasoning.encrypted_content"]))
    assert "logprobs" not in plain and "top_logprobs" not in plain
    assert renamed(ApiError(400, "x", param="logprobs")).param == "include"


def test_responses_logprobs_whole_and_streamed(client):
    reply = client.responses.create(model="tiny", input="Hi there", max_output_tokens=6, temperature=0,
                                    include=["message.output_text.logprobs"], top_logprobs=2)
    [part] = reply.output[0].content
    assert len(part.logprobs) == reply.usage.output_tokens
    assert b"".join(bytes(entry.bytes) for entry in part.logprobs).decode(errors="replace") == part.text
    for entry in part.logprobs:
        assert entry.logprob <= 0 and len(entry.top_logprobs) == 2
        assert entry.top_logprobs[0].logprob == pytest.approx(entry.logprob)  # greedy: the likeliest token
    assert client.responses.retrieve(reply.id).output[0].content[0].logprobs == part.logprobs
    events = list(client.responses.create(model="tiny", input="Hi there", max_output_tokens=6, temperature=0,
                                          include=["message.output_text.logprobs"], top_logprobs=2, stream=True))
    streamed = [entry for event in events if event.type == "response.output_text.delta" for entry in event.logprobs]
    assert [(e.token, round(e.logprob, 4)) for e in streamed] == [(e.token, round(e.logprob, 4)) for e in part.logprobs]
    [done] = [event for event in events if event.type == "response.output_text.done"]
    assert [e.token for e in done.logprobs] == [e.token for e in part.logprobs]
    plain = client.responses.create(model="tiny", input="Hi there", max_output_tokens=6, temperature=0)
    assert plain.output[0].content[0].logprobs == [] and plain.top_logprobs is None


def test_top_logprobs_alone_asks_for_no_logprobs_so_a_json_format_still_runs(client):
    """QA209 F2: a client sending `top_logprobs` (OpenAI's replies echo 0) without `include`
    gets no logprobs, and a JSON `text.format` or tools are not refused for them."""
    reply = client.responses.create(model="tiny", input="Hi there", max_output_tokens=6, temperature=0,
                                    top_logprobs=3)
    assert reply.output[0].content[0].logprobs == [] and reply.top_logprobs == 3
    shaped = client.responses.create(
        model="tiny", input="json", max_output_tokens=20, top_logprobs=0,
        text={"format": {"type": "json_schema", "name": "o", "strict": True, "schema": {
            "type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"],
            "additionalProperties": False}}})
    assert shaped.status == "completed" and isinstance(json.loads(shaped.output_text)["x"], int)


def test_input_tokens_are_counted_as_the_same_create_request_would_send(client):
    request = dict(model="tiny", input="Count me in.", instructions="Be terse.")
    counted = client.responses.input_tokens.count(**request)
    assert counted.object == "response.input_tokens" and counted.input_tokens > 0
    created = client.responses.create(max_output_tokens=2, **request)
    assert counted.input_tokens == created.usage.input_tokens
    follow_up = dict(model="tiny", input="And then?", previous_response_id=created.id)
    assert client.responses.input_tokens.count(**follow_up).input_tokens == \
        client.responses.create(max_output_tokens=2, **follow_up).usage.input_tokens
    with_tools = client.responses.input_tokens.count(tools=[WEATHER], **request)
    assert with_tools.input_tokens > counted.input_tokens
    assert client.responses.input_tokens.count(model="tiny", instructions="Only this.").input_tokens > 0


@pytest.mark.parametrize("body, status, param", [
    ({"model": "mock", "input": "hi"}, 400, "model"),
    ({"input": "hi"}, 400, "model"),
    ({"model": "nope", "input": "hi"}, 404, "model"),
    ({"model": "tiny", "input": "hi", "previous_response_id": "resp_unknown"}, 404, "previous_response_id"),
])
def test_input_tokens_refusals_name_the_parameter(gateway, body, status, param):
    answer = httpx.post(f"{gateway.base_url}/v1/responses/input_tokens", headers=gateway.headers(), json=body)
    assert answer.status_code == status and answer.json()["error"]["param"] == param


def test_response_ids_sort_in_the_order_the_responses_were_made(client):
    """The archive's primary key grows at its right edge (agents_trace.ordered_ids)."""
    made = [client.responses.create(model="tiny", input=f"order {i}", max_output_tokens=1).id for i in range(3)]
    assert sorted(made) == made and len(set(made)) == 3
    assert all(len(i) == len("resp_") + 24 and int(i.removeprefix("resp_"), 16) >= 0 for i in made)


def test_an_empty_reply_is_one_empty_message_whole_streamed_and_in_its_conversation(gateway, client, monkeypatch):
    """A model that stops at once (no text, no call) still answered: one empty message,
    the same in a whole response, a stream's events and the conversation's items."""
    from gateway.backend import Finished, Usage
    from gateway.local import LocalBackend

    async def run(self, prepared):
        yield Finished("stop", Usage(5, 1, 0), worker="w0", ttft_s=0.01)

    monkeypatch.setattr(LocalBackend, "run", run)
    conversation = client.conversations.create()
    whole = client.responses.create(model="tiny", input="hi", conversation=conversation.id)
    assert [(item.type, item.content[0].text) for item in whole.output] == [("message", "")]
    events = list(client.responses.create(model="tiny", input="again", conversation=conversation.id, stream=True))
    kinds = [event.type for event in events]
    assert kinds.count("response.output_item.added") == kinds.count("response.output_item.done") == 1
    assert [item.type for item in events[-1].response.output] == ["message"]
    items = list(client.conversations.items.list(conversation.id, order="asc"))
    assert [(item.role, item.content[0].text) for item in items] == [
        ("user", "hi"), ("assistant", ""), ("user", "again"), ("assistant", "")]


def test_null_stream_store_and_background_are_their_defaults():
    request = validate(ResponsesRequest, {"model": "m", "input": "hi", "stream": None, "store": None,
                                          "background": None})
    assert (request.stream, request.store, request.background) == (False, True, False)
    with pytest.raises(ApiError) as caught:
        validate(ResponsesRequest, {"model": "m", "input": "hi", "stream": "yes please"})
    assert caught.value.param == "stream"
    for field, value in (("background", "yes"), ("store", 1), ("stream", "on"), ("parallel_tool_calls", "off")):
        with pytest.raises(ApiError) as caught:   # as chat's: a typo never starts a background run
            validate(ResponsesRequest, {"model": "m", "input": "hi", field: value})
        assert caught.value.param == field


def test_a_cancel_ends_the_item_being_written_before_response_cancelled():
    """What a background stream was writing when it was cancelled is closed as it stands
    (`incomplete`, its text so far) before `response.cancelled`, which carries it."""
    request = ResponsesRequest(model="m", input="x", tools=[WEATHER], background=True)
    for events, cut in (([TextDelta("Hello, "), TextDelta("wor")], {"type": "message", "text": "Hello, wor"}),
                        ([TextDelta("Let me look."), ToolCallDelta(0, "call_1", "get_weather", ""),
                          ToolCallDelta(0, None, None, '{"city": "Pa')],
                         {"type": "function_call", "arguments": '{"city": "Pa'})):
        writer = ResponsesStreamWriter("resp_x", request, created_at=1)
        streamed = writer.queued() + writer.started() + b"".join(writer.event(e) for e in events)
        streamed += writer.cancelled(Usage(5, 3))
        sent = [json.loads(line.removeprefix(b"data: ")) for line in streamed.split(b"\n")
                if line.startswith(b"data: ")]
        assert [event["sequence_number"] for event in sent] == list(range(len(sent)))
        kinds = [event["type"] for event in sent]
        assert kinds[-1] == "response.cancelled" and kinds[-2] == "response.output_item.done"
        assert kinds.count("response.output_item.added") == kinds.count("response.output_item.done")
        assert kinds.count("response.content_part.added") == kinds.count("response.content_part.done")
        response = sent[-1]["response"]
        assert response["status"] == "cancelled" and response["usage"]["output_tokens"] == 3
        assert response["incomplete_details"] is None and response["output"][-1]["status"] == "incomplete"
        assert response["output"] == writer.snapshot("cancelled")["output"] and sent[-2]["item"] == response["output"][-1]
        last = response["output"][-1]
        assert last["type"] == cut["type"]
        assert (last["content"][0]["text"] if last["type"] == "message" else last["arguments"]) == next(
            value for key, value in cut.items() if key != "type")
    nothing = ResponsesStreamWriter("resp_y", request, created_at=1)   # cancelled while queued: no item
    assert [line for line in (nothing.queued() + nothing.cancelled()).split(b"\n") if line.startswith(b"event: ")] == [
        b"event: response.created", b"event: response.queued", b"event: response.cancelled"]
