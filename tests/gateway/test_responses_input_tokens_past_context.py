"""POST /v1/responses/input_tokens counts an input past the model's context (QA224 F4:
it answered the create request's 400 `context_length_exceeded`, the count only in its
message): counting is how a client learns it must trim. Its other refusals stand."""
from __future__ import annotations

import httpx
import pytest

LONG = "w " * 9000   # 18,000 tokens of the tiny model's byte tokenizer; its context is 8,192


def post(gateway, path: str, body: dict, tenant: str = "alpha") -> httpx.Response:
    return httpx.post(f"{gateway.base_url}/v1/responses{path}", headers=gateway.headers(tenant), json=body,
                      timeout=60)


@pytest.mark.parametrize("extra", [{}, {"max_output_tokens": 100}, {"truncation": "auto"}])
def test_an_input_past_the_context_is_counted(gateway, extra):
    body = {"model": "tiny", "input": LONG, **extra}
    counted = post(gateway, "/input_tokens", body)
    assert counted.status_code == 200, counted.text
    assert counted.json()["object"] == "response.input_tokens"
    num_tokens = counted.json()["input_tokens"]
    assert num_tokens > 18000
    created = post(gateway, "", body).json()["error"]   # the create request is still refused, with that count
    assert created["code"] == "context_length_exceeded" and str(num_tokens) in created["message"]


def test_a_conversation_cut_to_fit_is_counted_as_cut(gateway):
    first = post(gateway, "", {"model": "tiny", "input": "w " * 3000, "max_output_tokens": 1}).json()
    body = {"model": "tiny", "input": "w " * 3000, "previous_response_id": first["id"]}
    whole = post(gateway, "/input_tokens", body).json()["input_tokens"]
    cut = post(gateway, "/input_tokens", {**body, "truncation": "auto"}).json()["input_tokens"]
    assert whole > 8192 > cut > 6000


@pytest.mark.parametrize("body, status, param", [
    ({"model": "tiny", "input": [{"type": "web_search_call"}, {"role": "user", "content": LONG}]}, 400, "input[0]"),
    ({"model": "nope", "input": LONG}, 404, "model"),
])
def test_its_other_refusals_stand(gateway, body, status, param):
    answer = post(gateway, "/input_tokens", body)
    assert answer.status_code == status and answer.json()["error"]["param"] == param, answer.text


def test_another_tenants_conversation_is_still_not_found(gateway):
    conversation = httpx.post(f"{gateway.base_url}/v1/conversations", headers=gateway.headers("beta"), json={},
                              timeout=60).json()["id"]
    answer = post(gateway, "/input_tokens", {"model": "tiny", "input": LONG, "conversation": conversation})
    assert answer.status_code == 404 and answer.json()["error"]["param"] == "conversation"
