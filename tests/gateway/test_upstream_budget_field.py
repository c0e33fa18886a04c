"""A budgeted tenant's share reaches an upstream chat model as `max_completion_tokens`, the
field every chat model takes (QA147 finding 2): OpenAI's reasoning models (o-series, gpt-5)
refuse `max_tokens`, which the passthrough path used to send for a client that never sent
it. Legacy completions keep `max_tokens`, their only limit; a limit the call already carries
(the operator's `litellm_params`) is capped in its own field. The last test sends requests
through both transports to a fake upstream that refuses `max_tokens` as OpenAI does."""
import asyncio
import json

import pytest

from gateway.backend import Finished, TextDelta
from gateway.choices import run_choices, with_choices
from gateway.errors import ApiError
from gateway.model_configs import UpstreamModelConfig
from gateway.passthrough import PassthroughBackend
from gateway.schemas import ChatCompletionRequest, CompletionRequest, validate
from gateway.upstream import UpstreamBackend, estimate_num_tokens
from tests.gateway.fake_openai import request_body, send_json
from tests.gateway.serving import served_url

BUDGET = {"b": 300}
MESSAGES = [{"role": "user", "content": "hi"}]


def _backend(*, passthrough: bool, api_base: str = "http://127.0.0.1:9/v1", litellm_params=()) -> UpstreamBackend:
    config = UpstreamModelConfig(name="up", litellm_model="openai/reasoner", api_base=api_base,
                                 passthrough=passthrough, litellm_params=litellm_params)
    cls = PassthroughBackend if passthrough else UpstreamBackend
    return cls(config, default_completion_reserve_tokens=16, tenant_budget_room=BUDGET.get)


def _chat(**fields) -> ChatCompletionRequest:
    return validate(ChatCompletionRequest, {"model": "up", "messages": MESSAGES, **fields})


@pytest.mark.parametrize("passthrough", [False, True])
def test_a_budgeted_chat_request_is_sent_its_share_as_max_completion_tokens(passthrough):
    prepared = asyncio.run(_backend(passthrough=passthrough).prepare_chat(_chat(), "b", "r"))
    share = 300 - estimate_num_tokens(MESSAGES)
    kwargs = prepared.payload.kwargs
    assert kwargs.get("max_completion_tokens") == share and "max_tokens" not in kwargs, kwargs
    assert prepared.num_reserved_tokens == 300


@pytest.mark.parametrize("passthrough", [False, True])
def test_a_legacy_completion_keeps_max_tokens(passthrough):
    request = validate(CompletionRequest, {"model": "up", "prompt": "Once", "max_tokens": None})
    kwargs = asyncio.run(_backend(passthrough=passthrough).prepare_completion(request, "b", "r")).payload.kwargs
    assert kwargs["max_tokens"] == 300 - estimate_num_tokens("Once") and "max_completion_tokens" not in kwargs


def test_a_limit_the_call_carries_already_is_capped_in_its_own_field():
    """An operator's `max_tokens` (litellm_params): the share caps it; a lower one stays."""
    share = 300 - estimate_num_tokens(MESSAGES)
    for operator, sent in ((10_000, share), (5, 5)):
        backend = _backend(passthrough=False, litellm_params=(("max_tokens", operator),))
        kwargs = asyncio.run(backend.prepare_chat(_chat(), "b", "r")).payload.kwargs
        assert kwargs["max_tokens"] == sent and "max_completion_tokens" not in kwargs, kwargs


def test_a_clients_own_limit_is_sent_as_given():
    for field in ("max_tokens", "max_completion_tokens"):
        kwargs = asyncio.run(_backend(passthrough=True).prepare_chat(_chat(**{field: 40}), "b", "r")).payload.kwargs
        assert kwargs[field] == 40 and len({"max_tokens", "max_completion_tokens"} & kwargs.keys()) == 1


async def _reasoning_upstream(scope, receive, send) -> None:
    """A chat upstream that, like OpenAI's reasoning models, refuses `max_tokens`; otherwise
    it answers with the body it was sent, as JSON text."""
    raw = await request_body(scope, receive, send)
    if raw is None:
        return
    body = json.loads(raw)
    if "max_tokens" in body:
        await send_json(send, 400, {"error": {
            "message": "Unsupported parameter: 'max_tokens' is not supported with this model. "
                       "Use 'max_completion_tokens' instead.",
            "type": "invalid_request_error", "param": "max_tokens", "code": "unsupported_parameter"}})
        return
    message = {"role": "assistant", "content": json.dumps(body)}
    await send_json(send, 200, {"id": "chatcmpl-fake", "object": "chat.completion", "created": 1, "model": "reasoner",
                                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                                "usage": {"prompt_tokens": 7, "completion_tokens": 5, "total_tokens": 12}})


@pytest.fixture(scope="module")
def upstream_url():
    yield from served_url(_reasoning_upstream)


@pytest.mark.parametrize("passthrough", [False, True])
def test_a_model_that_refuses_max_tokens_takes_a_budgeted_request(upstream_url, passthrough):
    async def sent() -> dict:
        backend = _backend(passthrough=passthrough, api_base=upstream_url)
        await backend.start()
        try:
            prepared = with_choices(await backend.prepare_chat(_chat(), "b", "r"), None)
            try:
                events = [event async for event in run_choices(backend, prepared)]
            except ApiError as error:
                pytest.fail(f"the upstream refused the request: {error.status} {error.message}")
        finally:
            await backend.stop()
        assert isinstance(events[-1], Finished)
        return json.loads("".join(event.text for event in events if isinstance(event, TextDelta)))
    body = asyncio.run(sent())
    assert body["max_completion_tokens"] == 300 - estimate_num_tokens(MESSAGES) and "max_tokens" not in body
