"""`input` is optional, as in OpenAI's create reference and the SDK (QA224 F3): a turn may
answer a conversation's items (added with `conversations.items.create`) or continue
`previous_response_id` alone; only a request that gives the model nothing to answer is a
400 `missing_required_parameter` naming `input`."""
from __future__ import annotations

import httpx
import openai
import pytest

from gateway.responses_format import ResponsesRequest
from gateway.schemas import validate
from tests.gateway.conftest import KEYS


@pytest.fixture(scope="module")
def client(gateway):
    return openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=KEYS["alpha"], max_retries=0)


def test_a_missing_input_is_an_empty_list():
    assert validate(ResponsesRequest, {"model": "tiny", "previous_response_id": "resp_x"}).input == []


def test_a_conversation_whose_items_were_added_is_answered_without_input(client):
    conversation = client.conversations.create(items=[{"type": "message", "role": "user", "content": "hello"}])
    counted = client.responses.input_tokens.count(model="tiny", conversation=conversation.id).input_tokens
    reply = client.responses.create(model="tiny", conversation=conversation.id, max_output_tokens=2)
    assert reply.status in ("completed", "incomplete") and reply.usage.input_tokens == counted
    items = client.conversations.items.list(conversation.id, order="asc").data
    assert [item.role for item in items] == ["user", "assistant"]   # the reply alone was added
    assert list(client.responses.input_items.list(reply.id)) == []


def test_a_previous_response_is_continued_without_input(client):
    first = client.responses.create(model="tiny", input="Say more.", max_output_tokens=2)
    second = client.responses.create(model="tiny", previous_response_id=first.id, max_output_tokens=2)
    assert second.status in ("completed", "incomplete") and second.usage.input_tokens > first.usage.input_tokens
    assert second.previous_response_id == first.id


@pytest.mark.parametrize("extra", [{}, {"input": []}, {"instructions": "Be terse."},
                                   {"input": [{"type": "reasoning", "summary": []}]}, "empty conversation"])
def test_a_request_with_nothing_to_answer_is_missing_input(gateway, client, extra):
    if extra == "empty conversation":
        extra = {"conversation": client.conversations.create().id}
    answer = httpx.post(f"{gateway.base_url}/v1/responses", headers=gateway.headers(), timeout=60,
                        json={"model": "tiny", "max_output_tokens": 2, **extra})
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert (error["param"], error["code"]) == ("input", "missing_required_parameter")
    assert "'conversation'" in error["message"] and "'previous_response_id'" in error["message"]


def test_counting_nothing_is_the_create_requests_400_and_instructions_alone_are_counted(gateway):
    """QA229 F2: `{"model": "tiny"}` on input_tokens was chat's `empty_array`."""
    with httpx.Client(base_url=gateway.base_url, headers=gateway.headers("alpha"), timeout=30) as client:
        for path in ("/v1/responses/input_tokens", "/v1/responses"):
            error = client.post(path, json={"model": "tiny"}).json()["error"]
            assert (error["code"], error["param"]) == ("missing_required_parameter", "input"), (path, error)
        counted = client.post("/v1/responses/input_tokens", json={"model": "tiny", "instructions": "Be brief."})
        assert counted.status_code == 200 and counted.json()["input_tokens"] > 0
