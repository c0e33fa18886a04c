"""What an upstream model's litellm call gets: only the model's own key (never the
gateway's environment key sent to a third-party `api_base`), the client's OpenAI fields,
its other fields only in `extra_body`, and `user`."""
import asyncio
import json
import logging

import pytest

from gateway.model_configs import NO_API_KEY, UpstreamModelConfig
from gateway.passthrough import PassthroughBackend
from gateway.schemas import ChatCompletionRequest, validate
from gateway.upstream import UpstreamBackend
from gateway.upstream_kwargs import call_kwargs
from tests.gateway import fake_openai
from tests.gateway.serving import served_url

KEY_ENV = "STEPAHEAD_TEST_KWARGS_KEY"
UNSET_ENV = "STEPAHEAD_TEST_KWARGS_UNSET"
GATEWAY_KEY = "sk-the-gateways-own-openai-key"


@pytest.fixture(scope="module")
def api_base():
    yield from served_url(fake_openai.app)


@pytest.fixture
def gateway_env(monkeypatch):
    """The gateway process's environment: an OpenAI key of its own, the model's key, one unset name."""
    monkeypatch.setenv("OPENAI_API_KEY", GATEWAY_KEY)
    monkeypatch.setenv(KEY_ENV, "sk-the-models-key")
    monkeypatch.delenv(UNSET_ENV, raising=False)


def upstream_request(config: UpstreamModelConfig, body: dict) -> dict:
    """The request the fake upstream got ("echo-request"): its `authorization` and `body`."""
    async def drive():
        up = (PassthroughBackend if config.passthrough else UpstreamBackend)(config)
        await up.start()
        try:
            request = validate(ChatCompletionRequest, {
                "model": config.name, "messages": [{"role": "user", "content": "echo-request"}], **body})
            return [event async for event in up.run(await up.prepare_chat(request, "t", "req-1"))]
        finally:
            await up.stop()
    events = asyncio.run(drive())
    return json.loads(events[0].text)


@pytest.mark.parametrize("passthrough", [False, True])
@pytest.mark.parametrize("key_env", [UNSET_ENV, None])
def test_a_model_with_an_api_base_never_sends_the_gateways_environment_key(api_base, gateway_env, passthrough,
                                                                           key_env):
    config = UpstreamModelConfig(name="m", litellm_model="openai/fake-model", api_base=api_base,
                                 api_key_env=key_env, passthrough=passthrough)
    seen = upstream_request(config, {})
    assert GATEWAY_KEY not in json.dumps(seen)
    assert seen["authorization"] == (None if passthrough else f"Bearer {NO_API_KEY}")


@pytest.mark.parametrize("passthrough", [False, True])
def test_a_model_with_api_key_env_sends_that_key(api_base, gateway_env, passthrough):
    config = UpstreamModelConfig(name="m", litellm_model="openai/fake-model", api_base=api_base,
                                 api_key_env=KEY_ENV, passthrough=passthrough)
    assert upstream_request(config, {})["authorization"] == "Bearer sk-the-models-key"


def test_api_key_env_alone_never_falls_back_to_the_provider_environment(gateway_env):
    named = UpstreamModelConfig(name="m", litellm_model="openai/gpt-4o-mini", api_key_env=UNSET_ENV)
    assert call_kwargs(named, {}, stream=False)["api_key"] == NO_API_KEY
    # only a model that names neither a key nor a base leaves litellm its provider environment
    assert "api_key" not in call_kwargs(UpstreamModelConfig(name="m", litellm_model="openai/gpt-4o-mini"), {},
                                        stream=False)


def test_the_start_warns_of_an_unset_api_key_env(caplog, gateway_env):
    caplog.set_level(logging.WARNING, logger="stepahead.gateway")
    for config in (UpstreamModelConfig(name="nokey", litellm_model="openai/x", api_key_env=UNSET_ENV),
                   UpstreamModelConfig(name="haskey", litellm_model="openai/x", api_key_env=KEY_ENV)):
        asyncio.run(UpstreamBackend(config).start())
    lines = [record.getMessage() for record in caplog.records]
    assert lines == [f"stepahead: model 'nokey': api_key_env names ${UNSET_ENV}, which is not set (or empty): "
                     "its calls go upstream without an API key"]


def test_a_client_cannot_set_litellms_own_parameters(gateway_env):
    """`api_base` would send the gateway's key where the client says; `mock_response`
    would answer without the upstream: the client's non-OpenAI fields only go upstream,
    in `extra_body`, never as litellm's keyword arguments."""
    config = UpstreamModelConfig(name="m", litellm_model="openai/gpt-4o-mini", api_key_env=KEY_ENV)
    hostile = {"api_base": "http://attacker.example/v1", "base_url": "http://attacker.example/v1",
               "api_key": "sk-client", "mock_response": "free", "custom_llm_provider": "x", "timeout": 1}
    kwargs = call_kwargs(config, {"messages": [], "temperature": 0.5, "top_k": 3, **hostile}, stream=False)
    assert not (set(hostile) - {"api_key", "timeout"}) & set(kwargs)
    assert kwargs["api_key"] == "sk-the-models-key" and kwargs["timeout"] == config.timeout_s
    assert kwargs["temperature"] == 0.5 and kwargs["extra_body"]["top_k"] == 3
    assert kwargs["extra_body"]["api_base"] == "http://attacker.example/v1"   # forwarded as a plain field


def test_a_client_field_named_like_litellms_reaches_the_upstream_as_a_field(api_base, gateway_env):
    config = UpstreamModelConfig(name="m", litellm_model="openai/fake-model", api_base=api_base, api_key_env=KEY_ENV)
    seen = upstream_request(config, {"mock_response": "free", "top_k": 3})
    assert seen["body"]["mock_response"] == "free" and seen["body"]["top_k"] == 3   # not answered by litellm's mock


@pytest.mark.parametrize("passthrough", [False, True])
def test_user_reaches_the_upstream(api_base, gateway_env, passthrough):
    config = UpstreamModelConfig(name="m", litellm_model="openai/fake-model", api_base=api_base,
                                 api_key_env=KEY_ENV, passthrough=passthrough)
    assert upstream_request(config, {"user": "end-user-42"})["body"]["user"] == "end-user-42"


HINTS = {"store": True, "reasoning_effort": "a-future-effort", "prompt_cache_key": "k-1",
         "safety_identifier": "user-hash", "prediction": {"type": "content", "content": [{"type": "text", "text": "x"}]}}


# litellm itself refuses `verbosity` for models other than gpt-5 and `prediction` for gpt-5
@pytest.mark.parametrize("litellm_model, passthrough, fields", [
    ("openai/fake-model", False, HINTS),
    ("openai/gpt-5-mini", False, {"verbosity": "low", "reasoning_effort": "minimal"}),
    ("openai/fake-model", True, {**HINTS, "verbosity": "high"})])
def test_typed_hints_reach_upstream_models_as_sent(api_base, litellm_model, passthrough, fields):
    config = UpstreamModelConfig(name="m", litellm_model=litellm_model, api_base=api_base, passthrough=passthrough)
    seen = upstream_request(config, fields)["body"]
    assert {name: seen.get(name) for name in fields} == fields
