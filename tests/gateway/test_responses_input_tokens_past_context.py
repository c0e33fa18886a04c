"""POST /v1/responses/input_tokens counts an input past the model's context (QA224 F4:
it answered the create request's 400 `context_length_exceeded`, the count only in its
message): counting is how a client learns it must trim. Its other refusals stand.
FI154: also an input the create request refuses untokenized, its length alone past the
context ("at least N tokens"), up to `prompt_count.MAX_COUNTED_CHARS` characters."""
from __future__ import annotations

import httpx
import pytest

LONG = "w " * 9000   # 18,000 tokens of the tiny model's byte tokenizer; its context is 8,192
# past 8,192 tokens x 13 characters (its longest token): refused before it is tokenized (QA134 H0)
LONGER = "w " * 60000


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


def tokens_of(messages: list[dict], tools: list[dict] | None = None) -> int:
    """What the tiny model's tokenizer gives for the chat prompt rendered from `messages`."""
    from shards.chat_template import render_chat
    from shards.model_files import load_tokenizer

    return len(render_chat(load_tokenizer("tiny"), messages, tools))


def test_a_count_is_the_tokenizers_count_of_the_rendered_prompt(gateway):
    body = {"model": "tiny", "input": LONG, "instructions": "Be brief."}   # (counted by prepare_chat)
    counted = post(gateway, "/input_tokens", body).json()["input_tokens"]
    assert counted == tokens_of([{"role": "system", "content": "Be brief."}, {"role": "user", "content": LONG}])


@pytest.mark.parametrize("extra", [{}, {"max_output_tokens": 100}, {"truncation": "auto"}])
def test_an_input_whose_length_alone_is_past_the_context_is_counted(gateway, extra):
    body = {"model": "tiny", "input": LONGER, "instructions": "Be brief.", **extra}
    counted = post(gateway, "/input_tokens", body)
    assert counted.status_code == 200, counted.text
    expected = tokens_of([{"role": "system", "content": "Be brief."}, {"role": "user", "content": LONGER}])
    assert counted.json() == {"object": "response.input_tokens", "input_tokens": expected}
    assert expected > 100000
    created = post(gateway, "", body)   # the create request is still refused early, uncounted
    assert created.status_code == 400
    error = created.json()["error"]
    assert error["code"] == "context_length_exceeded" and "at least" in error["message"], error
    assert str(expected) not in error["message"]


def test_such_an_input_counts_its_tools(gateway):
    tool = {"type": "function", "name": "lookup", "description": "Look a word up.",
            "parameters": {"type": "object", "properties": {"word": {"type": "string"}}}}
    body = {"model": "tiny", "input": LONGER, "tools": [tool]}
    counted = post(gateway, "/input_tokens", body)
    assert counted.status_code == 200, counted.text
    chat_tool = {"type": "function", "function": {key: tool[key] for key in ("name", "description", "parameters")}}
    assert counted.json()["input_tokens"] == tokens_of([{"role": "user", "content": LONGER}], [chat_tool])


def test_a_conversation_whose_fullest_cut_is_past_the_context_counts_that_cut(gateway):
    first = post(gateway, "", {"model": "tiny", "input": "w " * 3000, "max_output_tokens": 1}).json()
    body = {"model": "tiny", "input": LONGER, "previous_response_id": first["id"]}
    whole = post(gateway, "/input_tokens", body)
    cut = post(gateway, "/input_tokens", {**body, "truncation": "auto"})
    assert whole.status_code == cut.status_code == 200, (whole.text, cut.text)
    assert cut.json()["input_tokens"] == tokens_of([{"role": "user", "content": LONGER}])   # the last turn alone
    assert whole.json()["input_tokens"] > cut.json()["input_tokens"] + 6000


def test_a_prompt_past_what_is_counted_keeps_the_at_least_refusal(gateway, monkeypatch):
    from gateway import prompt_count

    monkeypatch.setattr(prompt_count, "MAX_COUNTED_CHARS", len(LONGER))   # the rendered prompt is longer
    answer = post(gateway, "/input_tokens", {"model": "tiny", "input": LONGER})
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["code"] == "context_length_exceeded" and "at least" in error["message"]
    assert error["param"] == "input"


def test_client_special_text_is_counted_with_the_caches_encoder(gateway, monkeypatch):
    """A prompt holding client text that spells a special token is tokenized as marked
    text, by the prompt token cache's encoder: making one copies the tokenizer's backend
    (~150 ms of the GIL on SmolLM2) for each count."""
    from shards.special_text import MarkedTextEncoder

    def made_again(tokenizer):
        raise AssertionError("a MarkedTextEncoder was made for one count")
    monkeypatch.setattr(MarkedTextEncoder, "of", made_again)
    text = LONGER + "<|im_end|> not a turn's end"
    counted = post(gateway, "/input_tokens", {"model": "tiny", "input": text})
    assert counted.status_code == 200, counted.text
    monkeypatch.undo()
    assert counted.json()["input_tokens"] == tokens_of([{"role": "user", "content": text}])
