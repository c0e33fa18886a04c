"""Upstream models hold a tenant's token limits (QA74 findings 1 and 5): a budgeted tenant's
request that sets no completion limit is sent its share of what the budget has left (as
`max_completion_tokens` on chat, `max_tokens` on completions), and reserves it;
completions' `best_of` candidates, all billed by the upstream, are reserved like `n`. The
last test sends requests through both transports (litellm and passthrough) to a small fake
upstream and reads what it was sent."""
import asyncio
import json

import pytest

from gateway.backend import Finished, TextDelta
from gateway.budget_share import run_share
from gateway.choices import run_choices, with_choices
from gateway.config import LimitsConfig
from gateway.errors import ApiError
from gateway.limiters import Limiters
from gateway.model_configs import UpstreamModelConfig
from gateway.passthrough import PassthroughBackend
from gateway.schemas import ChatCompletionRequest, CompletionRequest, validate
from gateway.upstream import SENT_SHARE_WITHOUT_CONTEXT, UpstreamBackend, estimate_num_tokens
from tests.gateway.fake_openai import request_body, send_json
from tests.gateway.serving import served_url

PROMPT = "Once upon a time there was"   # estimate_num_tokens: 26 bytes // 4 + 8 = 14


def _backend(budget_room, *, passthrough: bool = False, max_context_tokens: int | None = None,
             api_base: str = "http://127.0.0.1:9/v1") -> UpstreamBackend:
    config = UpstreamModelConfig(name="up", litellm_model="openai/tiny", api_base=api_base,
                                 passthrough=passthrough, max_context_tokens=max_context_tokens)
    cls = PassthroughBackend if passthrough else UpstreamBackend
    return cls(config, default_completion_reserve_tokens=16, tenant_budget_room=budget_room)


def _completion(**fields) -> CompletionRequest:
    """`max_tokens: null` unless given ("no limit but the context"; absent, it is 16)."""
    return validate(CompletionRequest, {"model": "up", "prompt": PROMPT, "max_tokens": None, **fields})


def _prepare_completion(backend, request, tenant="b"):
    return with_choices(asyncio.run(backend.prepare_completion(request, tenant, "r")), request.n)


def test_run_share_leaves_the_prompts_and_splits_the_rest_equally():
    assert run_share(300, 14, 1) == 286
    assert run_share(300, 2 * 14, 2 * 3) == 45    # (300 - 28) // 6
    assert run_share(10, 14, 1) == 1              # never 0: the budget refuses it at admission
    assert run_share(0, 0, 0) == 1


@pytest.mark.parametrize("passthrough", [False, True])
def test_an_open_ended_completion_of_a_budgeted_tenant_is_capped_and_reserves_the_cap(passthrough):
    num_prompt = estimate_num_tokens(PROMPT)
    backend = _backend({"b": 300}.get, passthrough=passthrough)
    prepared = _prepare_completion(backend, _completion())
    assert prepared.payload.kwargs["max_tokens"] == 300 - num_prompt
    assert prepared.num_reserved_tokens == 300
    # n calls, each paying its prompt, each generating best_of candidates: an equal share each
    prepared = _prepare_completion(backend, _completion(n=2, best_of=3))
    share = (300 - 2 * num_prompt) // 6
    assert prepared.payload.kwargs["max_tokens"] == share and prepared.payload.kwargs["best_of"] == 3
    assert prepared.num_choices == 2 and prepared.best_of == 1   # the upstream runs the candidates
    assert prepared.num_reserved_tokens == 2 * num_prompt + 6 * share <= 300


def test_the_cap_leaves_room_for_the_prompt_in_a_known_context():
    num_prompt = estimate_num_tokens(PROMPT)
    prepared = _prepare_completion(_backend({"b": 10_000}.get, max_context_tokens=100), _completion())
    assert prepared.payload.kwargs["max_tokens"] == 100 - num_prompt
    assert prepared.num_reserved_tokens == 100


def test_an_open_ended_chat_request_is_capped_per_choice():
    backend = _backend({"b": 300}.get)
    request = validate(ChatCompletionRequest, {"model": "up", "n": 3,
                                               "messages": [{"role": "user", "content": "hi"}]})
    prepared = with_choices(asyncio.run(backend.prepare_chat(request, "b", "r")), 3)
    share = (300 - 3 * prepared.num_prompt_tokens) // 3
    assert prepared.payload.kwargs["max_completion_tokens"] == share and "max_tokens" not in prepared.payload.kwargs
    assert prepared.num_reserved_tokens == 3 * prepared.num_prompt_tokens + 3 * share <= 300


def test_without_a_budget_or_with_a_limit_nothing_is_capped():
    num_prompt = estimate_num_tokens(PROMPT)
    backend = _backend({"b": 300, "free": None}.get)
    free = _prepare_completion(backend, _completion(), tenant="free")
    assert "max_tokens" not in free.payload.kwargs and free.num_reserved_tokens == num_prompt + 16
    given = _prepare_completion(backend, _completion(max_tokens=500))
    assert given.payload.kwargs["max_tokens"] == 500 and given.num_reserved_tokens == num_prompt + 500
    chat = validate(ChatCompletionRequest, {"model": "up", "max_completion_tokens": 40,
                                            "messages": [{"role": "user", "content": "hi"}]})
    prepared = asyncio.run(backend.prepare_chat(chat, "b", "r"))
    assert "max_tokens" not in prepared.payload.kwargs and prepared.payload.kwargs["max_completion_tokens"] == 40
    assert prepared.num_reserved_tokens == prepared.num_prompt_tokens + 40
    no_room = _backend(None)   # a backend built without the limiters (tests, tools): as before
    assert "max_tokens" not in _prepare_completion(no_room, _completion()).payload.kwargs


@pytest.mark.parametrize("passthrough", [False, True])
def test_best_of_is_reserved_for_every_candidate(passthrough):
    """QA74 r8: `best_of: 10, max_tokens: 60` with a budget of 300 was admitted and spent 605."""
    num_prompt = estimate_num_tokens(PROMPT)
    limiters = Limiters({"b": LimitsConfig(token_budget=300)})
    backend = _backend(limiters.budget_room, passthrough=passthrough)
    prepared = _prepare_completion(backend, _completion(best_of=10, max_tokens=60))
    assert prepared.num_reserved_tokens == num_prompt + 10 * 60
    with pytest.raises(ApiError) as caught:
        asyncio.run(limiters["b"].acquire(prepared.num_reserved_tokens))
    assert caught.value.status == 429 and caught.value.code == "insufficient_quota"
    two = _prepare_completion(_backend(None, passthrough=passthrough), _completion(n=2, best_of=3, max_tokens=5))
    assert two.num_reserved_tokens == 2 * (num_prompt + 3 * 5)
    default = _prepare_completion(_backend(None), _completion(best_of=4))   # the default reserve, per candidate
    assert default.num_reserved_tokens == num_prompt + 4 * 16


async def _text_upstream(scope, receive, send) -> None:
    """A text-completions upstream that answers with the body it was sent, as JSON text."""
    raw = await request_body(scope, receive, send)
    if raw is None:
        return
    text = json.dumps(json.loads(raw))
    reply = {"id": "cmpl-fake", "object": "text_completion", "created": 1, "model": "tiny",
             "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": "length"}],
             "usage": {"prompt_tokens": 7, "completion_tokens": 5, "total_tokens": 12}}
    await send_json(send, 200, reply)


@pytest.fixture(scope="module")
def upstream_url():
    yield from served_url(_text_upstream)


@pytest.mark.parametrize("passthrough", [False, True])
def test_the_cap_and_best_of_reach_the_upstream(upstream_url, passthrough):
    async def sent() -> dict:
        backend = _backend({"b": 300}.get, passthrough=passthrough, api_base=upstream_url)
        await backend.start()
        try:
            prepared = with_choices(await backend.prepare_completion(_completion(best_of=2), "b", "r"), None)
            events = [event async for event in run_choices(backend, prepared)]
        finally:
            await backend.stop()
        assert isinstance(events[-1], Finished)
        return json.loads("".join(event.text for event in events if isinstance(event, TextDelta)))
    body = asyncio.run(sent())
    assert body["max_tokens"] == (300 - estimate_num_tokens(PROMPT)) // 2 and body["best_of"] == 2


@pytest.mark.parametrize("passthrough", [False, True])
def test_a_share_larger_than_a_model_of_unknown_context_may_take_is_reserved_but_not_sent(passthrough):
    # a max_tokens past the model's own output limit would be a 400 naming a field the client never sent
    num_prompt = estimate_num_tokens(PROMPT)
    large = _prepare_completion(_backend({"b": 1_000_000}.get, passthrough=passthrough), _completion())
    assert "max_tokens" not in large.payload.kwargs and large.num_reserved_tokens == 1_000_000
    room = num_prompt + SENT_SHARE_WITHOUT_CONTEXT
    small = _prepare_completion(_backend({"b": room}.get, passthrough=passthrough), _completion())
    assert small.payload.kwargs["max_tokens"] == SENT_SHARE_WITHOUT_CONTEXT
    known = _prepare_completion(_backend({"b": 1_000_000}.get, passthrough=passthrough, max_context_tokens=8192),
                                _completion())
    assert known.payload.kwargs["max_tokens"] == 8192 - num_prompt
