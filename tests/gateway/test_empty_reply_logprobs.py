"""Asked for log probabilities, a reply with no tokens of text (the model's first token
ends it) has an empty list of them, never `logprobs: null` (QA81 M4): chat's
`{"content": [], "refusal": null}`, legacy completions' empty parallel lists, whole and
streamed. `<|im_end|>` (id 257 in the tiny vocabulary) is forced first by `logit_bias`."""
from __future__ import annotations

import json

import httpx
import pytest

END_FIRST = {"max_tokens": 3, "logit_bias": {"257": 100}}
USER = [{"role": "user", "content": "Hi"}]
EMPTY_LEGACY = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}


def _post(gateway, path: str, body: dict) -> httpx.Response:
    with httpx.Client(base_url=gateway.base_url, timeout=60) as client:
        return client.post(path, headers=gateway.headers(), json=body)


def _stream(gateway, path: str, body: dict) -> list[dict]:
    with httpx.Client(base_url=gateway.base_url, timeout=60) as client:
        with client.stream("POST", path, headers=gateway.headers(), json={**body, "stream": True}) as response:
            assert response.status_code == 200
            return [json.loads(line[6:]) for line in response.iter_lines()
                    if line.startswith("data: {")]


@pytest.mark.parametrize("n", [1, 2])
def test_an_empty_chat_reply_asked_for_logprobs_has_an_empty_list(gateway, n):
    body = {"model": "tiny", "messages": USER, "logprobs": True, "n": n, "seed": 1, **END_FIRST}
    reply = _post(gateway, "/v1/chat/completions", body).json()
    assert [c["message"]["content"] for c in reply["choices"]] == [""] * n
    assert [c["logprobs"] for c in reply["choices"]] == [{"content": [], "refusal": None}] * n
    without = _post(gateway, "/v1/chat/completions", {**body, "logprobs": False}).json()
    assert [c["logprobs"] for c in without["choices"]] == [None] * n   # not asked: none
    chunks = _stream(gateway, "/v1/chat/completions", body)
    lists = [c["choices"][0]["logprobs"] for c in chunks if c["choices"] and c["choices"][0]["logprobs"]]
    assert lists == [{"content": [], "refusal": None}] * n


def test_an_empty_completion_asked_for_logprobs_has_empty_lists(gateway):
    body = {"model": "tiny", "prompt": "Hi", "logprobs": 2, **END_FIRST}
    reply = _post(gateway, "/v1/completions", body).json()
    assert reply["choices"][0]["text"] == "" and reply["choices"][0]["logprobs"] == EMPTY_LEGACY
    chunks = _stream(gateway, "/v1/completions", body)
    assert [c["choices"][0]["logprobs"] for c in chunks if c["choices"] and c["choices"][0]["logprobs"]] \
        == [EMPTY_LEGACY]
