"""Legacy completions with `echo: true, max_tokens: 0` (lm-eval-harness's loglikelihood,
OpenAI's legacy API, vLLM): a local model returns the prompt and its logprobs and generates
nothing: text the prompt, finish_reason "length", completion_tokens 0, the prompt's
logprobs (its first token's null) exactly as `max_tokens: 1` gives them for the prompt,
whole and streamed. Without `echo`, `max_tokens: 0` stays a 400 (nothing to return);
an upstream model gets the request as sent."""
from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from gateway.model_configs import UpstreamModelConfig
from gateway.schemas import CompletionRequest, validate
from gateway.upstream import UpstreamBackend

PROMPT = "The quick brown fox jumps"
ECHO_ZERO = {"model": "tiny", "prompt": PROMPT, "echo": True, "max_tokens": 0}


def _post(gateway, body: dict) -> httpx.Response:
    with httpx.Client(base_url=gateway.base_url, timeout=60) as client:
        return client.post("/v1/completions", headers=gateway.headers(), json=body)


def _stream(gateway, body: dict) -> list[dict]:
    with httpx.Client(base_url=gateway.base_url, timeout=60) as client:
        with client.stream("POST", "/v1/completions", headers=gateway.headers(),
                           json={**body, "stream": True}) as response:
            assert response.status_code == 200
            lines = list(response.iter_lines())
    assert [line for line in lines if line.startswith("data: ")][-1] == "data: [DONE]"
    return [json.loads(line[6:]) for line in lines if line.startswith("data: {")]


def _same_logprobs(got: dict, want: dict) -> None:
    assert got["tokens"] == want["tokens"] and got["text_offset"] == want["text_offset"]
    assert got["token_logprobs"][0] is None and want["token_logprobs"][0] is None
    assert got["token_logprobs"][1:] == pytest.approx(want["token_logprobs"][1:], abs=1e-5)
    assert got["top_logprobs"][0] is None
    for mine, theirs in zip(got["top_logprobs"][1:], want["top_logprobs"][1:]):
        assert mine == pytest.approx(theirs, abs=1e-5)


def test_echo_with_max_tokens_0_is_the_prompt_with_max_tokens_1s_prompt_logprobs(gateway):
    reply = _post(gateway, {**ECHO_ZERO, "logprobs": 2})
    assert reply.status_code == 200, reply.text
    reply = reply.json()
    [choice] = reply["choices"]
    num_prompt = reply["usage"]["prompt_tokens"]
    assert (choice["text"], choice["finish_reason"]) == (PROMPT, "length")
    assert reply["usage"]["completion_tokens"] == 0 and reply["usage"]["total_tokens"] == num_prompt
    assert len(choice["logprobs"]["tokens"]) == num_prompt and "".join(choice["logprobs"]["tokens"]) == PROMPT
    one = _post(gateway, {**ECHO_ZERO, "logprobs": 2, "max_tokens": 1, "temperature": 0}).json()
    prompt_part = {name: values[:num_prompt] for name, values in one["choices"][0]["logprobs"].items()}
    assert len(one["choices"][0]["logprobs"]["tokens"]) == num_prompt + 1   # the prompt's, and the token's
    _same_logprobs(choice["logprobs"], prompt_part)


def test_echo_with_max_tokens_0_without_logprobs_and_for_token_id_prompts(gateway):
    reply = _post(gateway, ECHO_ZERO).json()
    assert [(c["text"], c["logprobs"], c["finish_reason"]) for c in reply["choices"]] == [(PROMPT, None, "length")]
    assert reply["usage"]["completion_tokens"] == 0
    ids = [5, 6, 7]
    several = _post(gateway, {**ECHO_ZERO, "prompt": [ids, ids[:2]], "logprobs": 0}).json()
    assert [c["finish_reason"] for c in several["choices"]] == ["length", "length"]
    assert [len(c["logprobs"]["tokens"]) for c in several["choices"]] == [3, 2]
    assert several["usage"] == {**several["usage"], "prompt_tokens": 5, "completion_tokens": 0, "total_tokens": 5}


def test_a_streamed_echo_with_max_tokens_0_sends_the_prompt_then_ends_length(gateway):
    whole = _post(gateway, {**ECHO_ZERO, "logprobs": 1}).json()
    chunks = _stream(gateway, {**ECHO_ZERO, "logprobs": 1, "stream_options": {"include_usage": True}})
    choices = [chunk["choices"][0] for chunk in chunks if chunk["choices"]]
    assert "".join(c["text"] for c in choices) == PROMPT
    assert choices[0]["text"] == PROMPT   # the echo is one chunk, the first
    assert [c["finish_reason"] for c in choices] == [None] * (len(choices) - 1) + ["length"]
    assert chunks[-1]["usage"]["completion_tokens"] == 0
    streamed = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    for c in choices:
        for name, values in (c["logprobs"] or {}).items():
            streamed[name] += values
    _same_logprobs(streamed, whole["choices"][0]["logprobs"])


def test_max_tokens_0_without_echo_is_a_400_saying_why(gateway):
    reply = _post(gateway, {"model": "tiny", "prompt": PROMPT, "max_tokens": 0})
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert (error["param"], error["code"]) == ("max_tokens", "integer_below_min_value")
    assert "'echo': true" in error["message"] and "1 or more" in error["message"]
    assert _post(gateway, {"model": "tiny", "prompt": PROMPT, "max_tokens": -1}).status_code == 400


def test_an_upstream_model_gets_max_tokens_0_as_sent():
    backend = UpstreamBackend(UpstreamModelConfig(name="u", litellm_model="openai/x"))
    for echo in (True, False):
        request = validate(CompletionRequest, {"model": "u", "prompt": PROMPT, "max_tokens": 0, "echo": echo})
        prepared = asyncio.run(backend.prepare_completion(request, "t", "req-1"))
        assert (prepared.payload.kwargs["max_tokens"], prepared.payload.kwargs["echo"]) == (0, echo)
