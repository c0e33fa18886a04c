"""The other text endpoint's parameters sent to a local model (QA230 F3): completions'
`echo`, `best_of`, `suffix` on chat, and chat's `top_logprobs`, `max_completion_tokens`,
`messages`, `tools`, `tool_choice`, `response_format` on legacy completions, are a 400
`unsupported_parameter` naming the parameter and the endpoint that takes it, unless null
or at the value that changes nothing; upstream models receive them as sent (docs/api.md:
"a parameter stepahead cannot honour is a 400 naming it, never silently ignored")."""
from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from gateway.errors import ApiError
from gateway.local_refusals import refuse_unsupported_chat_params, refuse_unsupported_completion_params
from gateway.model_configs import UpstreamModelConfig
from gateway.schemas import ChatCompletionRequest, CompletionRequest, validate
from gateway.upstream import UpstreamBackend

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
COMPLETION = {"model": "tiny", "prompt": "hello", "max_tokens": 3}
ON_CHAT = [("echo", True), ("echo", 0), ("best_of", 3), ("best_of", True), ("suffix", "x"), ("suffix", "")]
ON_COMPLETIONS = [("top_logprobs", 3), ("top_logprobs", 0), ("max_completion_tokens", 3),
                  ("messages", [{"role": "user", "content": "hi"}]), ("response_format", {"type": "json_object"}),
                  ("tools", [{"type": "function", "function": {"name": "f"}}]), ("tool_choice", "auto")]
NO_OPS_ON_CHAT = [{"echo": False}, {"best_of": 1}, {"best_of": 1.0}, {"suffix": None}, {"echo": None, "best_of": None}]
NO_OPS_ON_COMPLETIONS = [{"top_logprobs": None}, {"max_completion_tokens": None}, {"tool_choice": "none"},
                         {"response_format": {"type": "text"}}, {"tools": None}]


def refused(refuse, model_cls, body: dict) -> ApiError:
    with pytest.raises(ApiError) as error:
        refuse(validate(model_cls, body))
    return error.value


@pytest.mark.parametrize("name, value", ON_CHAT)
def test_a_completions_parameter_on_chat_is_a_400_naming_it(name, value):
    error = refused(refuse_unsupported_chat_params, ChatCompletionRequest, {**CHAT, name: value})
    assert (error.status, error.param, error.code) == (400, name, "unsupported_parameter")
    assert f"'{name}' is a legacy completions parameter (/v1/completions)" in error.message


@pytest.mark.parametrize("name, value", ON_COMPLETIONS)
def test_a_chat_parameter_on_completions_is_a_400_naming_it(name, value):
    error = refused(refuse_unsupported_completion_params, CompletionRequest, {**COMPLETION, name: value})
    assert (error.status, error.param, error.code) == (400, name, "unsupported_parameter")
    assert f"'{name}' is a chat completions parameter (/v1/chat/completions)" in error.message


def test_the_refusals_point_to_what_the_endpoint_takes():
    top = refused(refuse_unsupported_completion_params, CompletionRequest, {**COMPLETION, "top_logprobs": 3})
    assert "legacy completions take 'logprobs': N" in top.message
    limit = refused(refuse_unsupported_completion_params, CompletionRequest,
                    {**COMPLETION, "max_completion_tokens": 3})
    assert "legacy completions take 'max_tokens'" in limit.message
    echo = refused(refuse_unsupported_chat_params, ChatCompletionRequest, {**CHAT, "echo": True})
    assert echo.message.endswith("Leave it out or set it to false.")


@pytest.mark.parametrize("extras", NO_OPS_ON_CHAT)
def test_null_and_no_op_completions_parameters_are_served_on_chat(extras):
    refuse_unsupported_chat_params(validate(ChatCompletionRequest, {**CHAT, **extras}))


@pytest.mark.parametrize("extras", NO_OPS_ON_COMPLETIONS)
def test_null_and_no_op_chat_parameters_are_served_on_completions(extras):
    refuse_unsupported_completion_params(validate(CompletionRequest, {**COMPLETION, **extras}))


def post(gateway, path: str, body: dict) -> httpx.Response:
    return httpx.post(f"{gateway.base_url}{path}", json=body, headers=gateway.headers("alpha"), timeout=60)


def test_a_served_local_model_answers_the_qa230_requests_with_the_400s(gateway):
    for path, body, name in (("/v1/chat/completions", {**CHAT, "echo": True}, "echo"),
                             ("/v1/chat/completions", {**CHAT, "best_of": 3}, "best_of"),
                             ("/v1/chat/completions", {**CHAT, "suffix": "x"}, "suffix"),
                             ("/v1/completions", {**COMPLETION, "top_logprobs": 3}, "top_logprobs")):
        reply = post(gateway, path, body)
        assert reply.status_code == 400, reply.text
        assert (reply.json()["error"]["param"], reply.json()["error"]["code"]) == (name, "unsupported_parameter")
    assert post(gateway, "/v1/chat/completions", {**CHAT, "echo": False, "best_of": 1, "suffix": None}).status_code == 200
    assert post(gateway, "/v1/completions", {**COMPLETION, "top_logprobs": None}).status_code == 200


@pytest.mark.parametrize("model", ["fake", "fake-direct"])
def test_an_upstream_chat_model_receives_them_as_sent(gateway, model):
    extras = {"echo": True, "best_of": 3, "suffix": "x"}
    reply = post(gateway, "/v1/chat/completions",
                 {"model": model, "messages": [{"role": "user", "content": "echo-request"}], **extras})
    assert reply.status_code == 200, reply.text
    sent = json.loads(reply.json()["choices"][0]["message"]["content"])["body"]
    assert {name: sent.get(name) for name in extras} == extras


def test_an_upstream_completions_call_carries_chat_parameters_as_sent():
    backend = UpstreamBackend(UpstreamModelConfig(name="m", litellm_model="openai/x", api_base="http://127.0.0.1:9/v1"))
    request = validate(CompletionRequest, {"model": "m", "prompt": "hi", "top_logprobs": 3, "tool_choice": "auto"})
    prepared = asyncio.run(backend.prepare_completion(request, "t", "cmpl-1"))
    assert prepared.payload.kwargs["top_logprobs"] == 3 and prepared.payload.kwargs["tool_choice"] == "auto"
