"""Upstream error shapes on `/v1/completions` (QA74 findings 8 and 9): litellm's own refusal
of a parameter is a 400 `unsupported_parameter` naming it in the gateway's words, and a
context overflow names the upstream's `param`, else `prompt` (never chat's `messages`),
without litellm's `ContextWindowExceededError: OpenAIException - Error code: 400 - `.
Requests go through litellm and the passthrough to a small fake upstream."""
import asyncio
import json

import pytest

from gateway.errors import ApiError
from gateway.litellm_errors import map_upstream_status, unsupported_params_error
from gateway.model_configs import UpstreamModelConfig
from gateway.passthrough import PassthroughBackend
from gateway.schemas import ChatCompletionRequest, CompletionRequest, validate
from gateway.upstream import UpstreamBackend
from tests.gateway.fake_openai import request_body, send_json
from tests.gateway.serving import served_url

OVERFLOW = "This model's maximum context length is 8192 tokens. However, you requested 8196 tokens."


async def _overflowing_upstream(scope, receive, send) -> None:
    """Every request is a 400 `context_length_exceeded`; its `param` is the prompt's text
    after "param:" ("none": no param), as vLLM and OpenAI name "prompt" or "max_tokens"."""
    raw = await request_body(scope, receive, send)
    if raw is None:
        return
    body = json.loads(raw)
    text = body.get("prompt") or body["messages"][-1]["content"]
    param = text.partition("param:")[2] or None
    error = {"message": OVERFLOW, "type": "invalid_request_error",
             "param": None if param == "none" else param, "code": "context_length_exceeded"}
    await send_json(send, 400, {"error": error})


@pytest.fixture(scope="module")
def upstream_url():
    yield from served_url(_overflowing_upstream)


def _error(api_base: str, passthrough: bool, body: dict) -> ApiError:
    """The error a request (`body`: a `prompt` or `messages`) ended with."""
    config = UpstreamModelConfig(name="up", litellm_model="openai/tiny", api_base=api_base, passthrough=passthrough)

    async def run() -> ApiError:
        backend = (PassthroughBackend if passthrough else UpstreamBackend)(config)
        await backend.start()
        try:
            if "prompt" in body:
                prepared = await backend.prepare_completion(validate(CompletionRequest, {"model": "up", **body}),
                                                            "t", "r")
            else:
                prepared = await backend.prepare_chat(validate(ChatCompletionRequest, {"model": "up", **body}),
                                                      "t", "r")
            with pytest.raises(ApiError) as caught:
                async for _ in backend.run(prepared):
                    pass
            return caught.value
        finally:
            await backend.stop()
    return asyncio.run(run())


@pytest.mark.parametrize("passthrough", [False, True])
def test_a_completions_context_overflow_names_the_upstreams_param_else_prompt(upstream_url, passthrough):
    for text, param in (("hi param:prompt", "prompt"), ("hi param:max_tokens", "max_tokens"),
                        ("hi param:none", "prompt")):
        error = _error(upstream_url, passthrough, {"prompt": text, "max_tokens": 4})
        assert (error.status, error.code, error.param) == (400, "context_length_exceeded", param), text
        assert error.message == OVERFLOW   # the upstream's words alone, no litellm prefix
    chat = _error(upstream_url, passthrough, {"messages": [{"role": "user", "content": "hi param:none"}]})
    assert (chat.code, chat.param) == ("context_length_exceeded", "messages")


def test_a_parameter_litellm_refuses_is_a_400_naming_it(upstream_url):
    error = _error(upstream_url, False, {"prompt": "Hello", "max_completion_tokens": 3})
    assert (error.status, error.type, error.code, error.param) == (
        400, "invalid_request_error", "unsupported_parameter", "max_completion_tokens")
    assert "'max_completion_tokens'" in error.message
    assert "drop_params" not in error.message and "litellm" not in error.message.lower()


def test_every_shape_of_litellms_refusal_names_its_parameter():
    from litellm.exceptions import UnsupportedParamsError
    for message, param in (
            ("p does not support parameters: ['max_completion_tokens', 'seed'], for model=m. To drop these, "
             "set `litellm.drop_params=True` or for proxy:\n\n`litellm_settings:\n drop_params: true`\n",
             "max_completion_tokens"),
            ("together_ai does not support parameters: tools, tool_choice, for model=m. To drop it", "tools"),
            ("Setting `logit_bias` is not supported by p, m. To drop it from the call, set `litellm.drop_params = "
             "True`.", "logit_bias"),
            ("Setting {'seed': 3} is not supported by p. To drop it from the call", "seed"),
            ("Setting dimensions is not supported for OpenAI `text-embedding-3` and later models.", "dimensions"),
            ("Something else entirely.", None)):
        error = unsupported_params_error(UnsupportedParamsError(message=message, llm_provider="p", model="m"))
        assert (error.status, error.code, error.param) == (400, "unsupported_parameter", param), message
        assert "drop" not in error.message and "\n" not in error.message


def test_an_upstream_status_keeps_its_context_param_else_names_the_prompt_field():
    assert map_upstream_status(400, OVERFLOW, "context_length_exceeded", param="max_tokens",
                               prompt_param="prompt").param == "max_tokens"
    assert map_upstream_status(400, OVERFLOW, "context_length_exceeded", prompt_param="prompt").param == "prompt"
    assert map_upstream_status(400, OVERFLOW, "context_length_exceeded").param == "messages"
