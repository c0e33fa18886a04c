"""Bodies the gateway sends, validated strictly (`model_validate(..., strict=True)`)
against the installed `openai` SDK's types, on the tiny model: a chat completion, a text
completion, a response object and its stream's last event, and the item lists of
`input_items` and of a conversation. Also the fields OpenAI always sends that the SDK
types leave optional (`system_fingerprint`, `completion_tokens_details`, `annotations`,
`reasoning`, the sampling values used)."""
import json

import httpx
import pytest
from openai.types import Completion
from openai.types.chat import ChatCompletion
from openai.types.conversations import ConversationItemList
from openai.types.responses import Response, ResponseCompletedEvent, ResponseIncompleteEvent, ResponseItemList

from gateway.backend import Finished, TextDelta, Usage
from gateway.collected import Reply
from gateway.openai_format import ResponseHeader, chat_completion
from gateway.responses_format import ResponsesRequest
from gateway.responses_objects import input_items, response_object

LAST_EVENTS = {"response.completed": ResponseCompletedEvent, "response.incomplete": ResponseIncompleteEvent}


def _post(gateway, path: str, body: dict) -> dict:
    response = httpx.post(f"{gateway.base_url}/v1{path}", json=body, headers=gateway.headers(), timeout=120)
    assert response.status_code == 200, response.text
    return response.json()


def _get(gateway, path: str) -> dict:
    response = httpx.get(f"{gateway.base_url}/v1{path}", headers=gateway.headers(), timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


def test_a_chat_completion_is_strictly_valid_with_the_fields_openai_always_sends(gateway):
    body = _post(gateway, "/chat/completions", {"model": "tiny", "messages": [{"role": "user", "content": "hi"}],
                                                "max_tokens": 3})
    ChatCompletion.model_validate(body, strict=True)
    assert "system_fingerprint" in body and body["system_fingerprint"] is None   # a local model's, as vLLM's
    assert body["choices"][0]["message"]["annotations"] == []
    assert body["usage"]["completion_tokens_details"] == {"reasoning_tokens": 0, "audio_tokens": 0,
                                                          "accepted_prediction_tokens": 0,
                                                          "rejected_prediction_tokens": 0}


def test_a_text_completion_is_strictly_valid_with_a_system_fingerprint(gateway):
    body = _post(gateway, "/completions", {"model": "tiny", "prompt": "Once upon", "max_tokens": 3})
    Completion.model_validate(body, strict=True)
    assert "system_fingerprint" in body and body["system_fingerprint"] is None


def test_a_response_and_its_retrieval_are_strictly_valid(gateway):
    body = _post(gateway, "/responses", {"model": "tiny", "input": "Say hi", "max_output_tokens": 4})
    for shape in (body, _get(gateway, f"/responses/{body['id']}")):
        Response.model_validate(shape, strict=True)
        details = shape["usage"]["input_tokens_details"]
        # the whole new prompt blocks (block_size 16) its worker wrote, never a last partial one
        assert details["cache_write_tokens"] == (shape["usage"]["input_tokens"] // 16 - details["cached_tokens"] // 16) * 16
        assert shape["reasoning"] == {"effort": None, "summary": None}
        assert (shape["temperature"], shape["top_p"]) == (1.0, 1.0)   # the values used, not null
    chosen = _post(gateway, "/responses", {"model": "tiny", "input": "Say hi", "max_output_tokens": 2,
                                           "temperature": 0, "top_p": 0.5})
    assert (chosen["temperature"], chosen["top_p"]) == (0, 0.5)


def test_a_response_streams_last_event_is_strictly_valid(gateway):
    with httpx.stream("POST", f"{gateway.base_url}/v1/responses", headers=gateway.headers(), timeout=120,
                      json={"model": "tiny", "input": "Say hi", "max_output_tokens": 4, "stream": True}) as stream:
        events = [json.loads(line.removeprefix("data: ")) for line in stream.iter_lines()
                  if line.startswith("data: ")]
    last = events[-1]
    LAST_EVENTS[last["type"]].model_validate(last, strict=True)
    assert "cache_write_tokens" in last["response"]["usage"]["input_tokens_details"]


def test_listed_input_items_and_conversation_items_are_strictly_valid(gateway):
    turns = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
             {"role": "user", "content": [{"type": "input_text", "text": "and"}]},
             {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "so"}]},
             {"role": "user", "content": "bye"}]
    reply = _post(gateway, "/responses", {"model": "tiny", "input": turns, "max_output_tokens": 2})
    listed = _get(gateway, f"/responses/{reply['id']}/input_items?order=asc")
    ResponseItemList.model_validate(listed, strict=True)
    assert listed["data"][1]["content"] == [{"type": "output_text", "text": "hello", "annotations": []}]
    assert all(item["status"] == "completed" for item in listed["data"])
    conversation = _post(gateway, "/conversations", {"items": turns[:4]})
    items = _get(gateway, f"/conversations/{conversation['id']}/items?order=asc")
    ConversationItemList.model_validate(items, strict=True)
    assert items["data"][1]["content"] == [{"type": "output_text", "text": "hello", "annotations": []}]


def test_listed_items_of_every_kind_have_a_status_and_text_parts_of_their_roles_kind():
    items = input_items(ResponsesRequest(model="m", input=[
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "output_text", "text": "b"}]},
        {"role": "assistant", "content": [{"type": "input_text", "text": "c"},
                                          {"type": "output_text", "text": "d", "annotations": None}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "42", "status": "incomplete"},
        {"type": "reasoning", "summary": []}]), "resp_abc")
    assert [part["type"] for part in items[0]["content"]] == ["input_text", "input_text"]
    assert items[1]["content"] == [{"type": "output_text", "text": "c", "annotations": []},
                                   {"type": "output_text", "text": "d", "annotations": []}]
    assert [item.get("status") for item in items] == ["completed", "completed", "completed", "incomplete", None]
    ResponseItemList.model_validate({"object": "list", "data": list(items[:4]), "first_id": "a", "last_id": "b",
                                     "has_more": False}, strict=True)


def test_response_usage_reports_the_prompt_tokens_written_to_the_cache():
    """A local model's: its worker's count (`FinishEvent.num_cache_write_tokens`), 0 when
    none is known; an upstream's: its own count, 0 when it sent none; n > 1 upstream calls:
    summed; n > 1 local choices: the prompt's first choice's."""
    from gateway.choices import merged_usage
    from gateway.upstream_usage import usage_from

    def details(usage: Usage) -> dict:
        body = response_object("resp_x", ResponsesRequest(model="m", input="hi"), usage=usage)
        Response.model_validate(body, strict=True)
        return body["usage"]["input_tokens_details"]

    assert details(Usage(40, 3, 0, num_cache_write_tokens=32)) == {"cached_tokens": 0, "cache_write_tokens": 32}
    assert details(Usage(40, 3, 32)) == {"cached_tokens": 32, "cache_write_tokens": 0}
    raw = {"prompt_tokens": 40, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 32}}
    assert details(usage_from(raw, Usage())) == {"cached_tokens": 32, "cache_write_tokens": 0}
    raw["prompt_tokens_details"]["cache_write_tokens"] = 5
    upstream = usage_from(raw, Usage())
    assert details(upstream) == {"cached_tokens": 32, "cache_write_tokens": 5}
    two = merged_usage([Finished("stop", upstream, choice=0, pays_own_prompt=True),
                        Finished("stop", upstream, choice=1, pays_own_prompt=True)]).usage
    assert details(two) == {"cached_tokens": 64, "cache_write_tokens": 10}
    local = [Finished("stop", Usage(40, 3, 0 if i == 0 else 32, num_cache_write_tokens=32 if i == 0 else 0), choice=i)
             for i in (0, 1)]
    assert merged_usage(local).usage.cache_write_tokens == 32


def test_completion_tokens_details_are_zero_for_a_local_model_and_an_upstreams_own_otherwise():
    def usage_of(worker: str, details: dict | None) -> dict:
        reply = Reply.of(1)
        reply.add(TextDelta("hi"))
        reply.add(Finished("stop", Usage(3, 1, 0, details), worker=worker))
        return chat_completion(ResponseHeader("chatcmpl-1", "m"), reply, reply.finished.usage)["usage"]

    assert usage_of("w0", None)["completion_tokens_details"]["reasoning_tokens"] == 0
    assert "completion_tokens_details" not in usage_of("upstream", None)   # not known: not made up
    assert usage_of("upstream", {"reasoning_tokens": 2})["completion_tokens_details"] == {"reasoning_tokens": 2}


@pytest.mark.parametrize("fingerprint", [None, "fp_up"])
def test_a_whole_reply_always_has_a_system_fingerprint_the_upstreams_when_it_names_one(fingerprint):
    reply = Reply.of(1)
    reply.add(Finished("stop", Usage(3, 1), system_fingerprint=fingerprint))
    body = chat_completion(ResponseHeader("chatcmpl-1", "m"), reply, reply.finished.usage)
    assert body["system_fingerprint"] == fingerprint


@pytest.mark.parametrize("text, echoed", [
    (None, {"format": {"type": "text"}}),
    ({"verbosity": "low"}, {"verbosity": "low", "format": {"type": "text"}}),   # was format-less: text.format None
    ({"format": None}, {"format": {"type": "text"}}),
    ({"format": {"type": "json_object"}}, {"format": {"type": "json_object"}}),
])
def test_a_responses_text_setting_is_echoed_with_its_format_always_named(text, echoed):
    body = response_object("resp_x", ResponsesRequest(model="m", input="hi", text=text))
    assert body["text"] == echoed
    assert Response.model_validate(body).text.format.type == echoed["format"]["type"]
