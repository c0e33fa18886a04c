"""Upstream models forwarded without litellm (`passthrough = true`), against the fake server."""
import asyncio
import json

import openai
import pytest

from gateway.config import ConfigError, UpstreamModelConfig, parse_config, key_digest
from gateway.errors import ApiError
from gateway.schemas import ChatCompletionRequest, CompletionRequest
from gateway.upstream import UpstreamBackend
from tests.gateway.conftest import KEYS
from tests.gateway.test_http_errors import assert_error, post


@pytest.fixture(scope="module")
def client(gateway):
    return openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=KEYS["alpha"], max_retries=0)


def test_passthrough_whole_and_streamed_replies(client):
    whole = client.chat.completions.create(
        model="fake-direct", messages=[{"role": "user", "content": "ping"}])
    assert whole.model == "fake-direct" and whole.choices[0].message.content == "echo: ping"
    assert whole.usage.prompt_tokens_details.cached_tokens == 2
    chunks = list(client.chat.completions.create(
        model="fake-direct", messages=[{"role": "user", "content": "a b"}], stream=True,
        stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.split() == ["echo:", "a", "b"] and chunks[-1].usage.completion_tokens == 3


def test_passthrough_tool_calls(client):
    stream = client.chat.completions.create(
        model="fake-direct", messages=[{"role": "user", "content": "tool"}], stream=True,
        tools=[{"type": "function", "function": {"name": "lookup"}}])
    deltas = [c.choices[0].delta.tool_calls[0] for c in stream
              if c.choices and c.choices[0].delta.tool_calls]
    assert deltas[0].id == "call_fake1"
    assert json.loads("".join(d.function.arguments or "" for d in deltas)) == {"q": "x"}


def test_passthrough_maps_upstream_errors(gateway):
    def ask(text):
        return post(gateway, {"model": "fake-direct",
                              "messages": [{"role": "user", "content": text}]})
    assert_error(ask("status:400"), 400, "context_length_exceeded")
    assert_error(ask("status:401"), 502, "upstream_auth_error")
    assert_error(ask("status:429"), 429, "rate_limit_exceeded")
    assert_error(ask("status:500"), 502)


def test_passthrough_needs_an_openai_compatible_api_base():
    tenants = [{"name": "t", "api_key_sha256": [key_digest("k")]}]
    with pytest.raises(ConfigError, match="api_base"):
        parse_config({"models": [{"name": "m", "kind": "upstream", "passthrough": True,
                                  "litellm_model": "openai/x"}], "tenants": tenants})
    with pytest.raises(ConfigError, match="OpenAI-compatible"):
        parse_config({"models": [{"name": "m", "kind": "upstream", "passthrough": True,
                                  "litellm_model": "anthropic/claude", "api_base": "http://x"}],
                      "tenants": tenants})


def test_replay_hints_are_not_forwarded_upstream():
    import asyncio

    from gateway.config import UpstreamModelConfig
    from gateway.schemas import ChatCompletionRequest, CompletionRequest, validate
    from gateway.upstream import UpstreamBackend

    backend = UpstreamBackend(UpstreamModelConfig(name="u", litellm_model="openai/x"))
    hint = {"stepahead_replay": {"tool_calls": ["ls"]}}
    chat = validate(ChatCompletionRequest, {"model": "u", "messages": [{"role": "user", "content": "x"}],
                                            "top_k": 3, **hint})
    text = validate(CompletionRequest, {"model": "u", "prompt": "x", **hint})
    for prepared in (asyncio.run(backend.prepare_chat(chat, "t", "r1")),
                     asyncio.run(backend.prepare_completion(text, "t", "r2"))):
        assert "stepahead_replay" not in prepared.payload.kwargs
    # extras still go, in extra_body: litellm forwards them without reading them
    assert asyncio.run(backend.prepare_chat(chat, "t", "r3")).payload.kwargs["extra_body"]["top_k"] == 3


def test_structured_response_format_goes_upstream_as_sent():
    import asyncio

    from gateway.config import UpstreamModelConfig
    from gateway.schemas import ChatCompletionRequest, validate
    from gateway.upstream import UpstreamBackend

    backend = UpstreamBackend(UpstreamModelConfig(name="u", litellm_model="openai/x"))
    response_format = {"type": "json_schema", "json_schema": {
        "name": "answer", "strict": True,
        "schema": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}
    chat = validate(ChatCompletionRequest, {"model": "u", "messages": [{"role": "user", "content": "x"}],
                                            "response_format": response_format})
    assert asyncio.run(backend.prepare_chat(chat, "t", "r1")).payload.kwargs["response_format"] == response_format


def test_n_choices_are_one_upstream_call_each_with_their_own_seed(client):
    for model in ("fake-direct", "fake"):
        reply = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "ping"}],
                                               n=3, seed=40)
        assert [c.message.content for c in reply.choices] == [f"echo: ping seed {s}" for s in (40, 41, 42)]
        assert reply.usage.completion_tokens == 3 * 4  # each upstream reply is 4 words long


@pytest.mark.parametrize("request_body, param", [
    (ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "word " * 400}]),
     "messages"),
    (CompletionRequest(model="m", prompt=[7] * 300, max_tokens=16), "prompt")])
def test_upstream_context_limit_names_what_holds_the_prompt(request_body, param):
    backend = UpstreamBackend(UpstreamModelConfig(name="m", litellm_model="openai/m",
                                                  max_context_tokens=256))
    prepare = (backend.prepare_chat if isinstance(request_body, ChatCompletionRequest)
               else backend.prepare_completion)
    with pytest.raises(ApiError) as caught:
        asyncio.run(prepare(request_body, "t", "req-1"))
    assert caught.value.code == "context_length_exceeded" and caught.value.param == param
    assert f"in the {param}," in caught.value.message or f"your {param} resulted in" in caught.value.message


@pytest.mark.parametrize("model", ["fake", "fake-direct"])
def test_a_failed_upstream_step_records_no_made_up_prompt_tokens(gateway, model):
    """An upstream model's prompt is not tokenized here: a step that failed before the
    upstream counted it records none, not the gateway's estimate."""
    from agents_trace.step_queries import list_steps

    session = f"failed-upstream-{model}"
    response = post(gateway, {"model": model, "messages": [{"role": "user", "content": "status:500"}]},
                    headers={**gateway.headers(), "x-session-id": session})
    assert response.status_code == 502
    assert gateway.state.tracer.flush(15)
    [step] = list_steps(gateway.state.tracer.store_path, "alpha", session)["data"]
    assert step["error"] and step["num_input_tokens"] == 0
