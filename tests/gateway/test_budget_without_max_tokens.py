"""A tenant's `token_budget` holds for a request that sets no `max_tokens` (QA74 finding 1):
a local model caps each run at its share of what the budget has left after the prompts,
and reserves that share (gateway/local.py, `TenantLimiter.budget_room`).

The prepare checks use a stand-in engine (the attributes `prepare_*` read); one test runs
the real tiny model to see a capped run finish `length` with the budget kept.
"""

import pytest

from gateway.choices import run_choices, with_choices
from gateway.config import LimitsConfig, LocalModelConfig
from gateway.errors import ApiError
from gateway.limiters import Limiters
from gateway.limits import TenantLimiter
from gateway.local import LocalBackend
from gateway.schemas import ChatCompletionRequest, CompletionRequest, validate
from tests.gateway.local_stand_ins import EngineFacts, bare_local_backend


def _backend(budget_room) -> LocalBackend:
    from shards.tiny_model import build_tiny_tokenizer
    return bare_local_backend(EngineFacts(False, 1000, build_tiny_tokenizer()), tenant_budget_room=budget_room)


def _completion(**fields) -> CompletionRequest:
    """`max_tokens: null` unless given: "no limit but the context" (absent, it is 16)."""
    return validate(CompletionRequest, {"model": "plain", "prompt": [65, 66, 67, 68], "max_tokens": None, **fields})


def test_budget_room_is_what_the_budget_has_left_within_a_minutes_tokens():
    limiter = TenantLimiter("t", LimitsConfig(token_budget=300))
    limiter.num_spent_tokens, limiter.num_reserved_tokens = 100, 50
    assert limiter.budget_room() == 150
    limiter.num_spent_tokens = 400   # over (another gateway spent it): nothing, never negative
    assert limiter.budget_room() == 0
    assert TenantLimiter("t", LimitsConfig(token_budget=300, tokens_per_minute=120)).budget_room() == 120
    # QA86: what the minute's bucket holds now, not when full (a request sized to it is admitted now)
    now = [0.0]
    minute = TenantLimiter("t", LimitsConfig(token_budget=300, tokens_per_minute=120), clock=lambda: now[0])
    minute._tokens.level = 20.0   # 100 of its 120 tokens spent a moment ago
    assert minute.budget_room() == 20
    now[0] = 30.0   # half a minute later: 60 more
    assert minute.budget_room() == 80
    assert TenantLimiter("t", LimitsConfig(tokens_per_minute=120)).budget_room() is None   # no budget
    limiters = Limiters({"b": LimitsConfig(token_budget=50), "free": LimitsConfig()})
    assert (limiters.budget_room("b"), limiters.budget_room("free"), limiters.budget_room("nobody")) == (50, None, None)


async def test_a_completion_without_max_tokens_is_capped_at_the_budget_left_and_reserves_it():
    local = _backend({"b": 300}.get)
    prepared = with_choices(await local.prepare_completion(_completion(), "b", "r"), None)
    assert prepared.payload.sampling.max_tokens == 296 and prepared.num_reserved_tokens == 300
    # n choices of two prompts: each of the 4 runs gets an equal share of what is left
    two = _completion(prompt=[[65, 66, 67, 68], [65, 66]], n=2)
    prepared = with_choices(await local.prepare_completion(two, "b", "r"), 2)
    assert [call.sampling.max_tokens for call in prepared.payload] == [73, 73]   # (300 - 6) // 4
    assert prepared.num_reserved_tokens == 6 + 4 * 73 <= 300
    best = with_choices(await local.prepare_completion(_completion(best_of=3), "b", "r"), None)
    assert best.payload.sampling.max_tokens == 98 and best.num_reserved_tokens == 4 + 3 * 98
    # the context's room stays the cap when the budget leaves more
    roomy = _backend({"b": 10_000}.get)
    prepared = await roomy.prepare_completion(_completion(), "b", "r")
    assert prepared.payload.sampling.max_tokens == 996 and prepared.num_reserved_tokens == 1000


async def test_without_a_budget_or_with_max_tokens_nothing_changes():
    local = _backend({"b": 300, "free": None}.get)
    free = await local.prepare_completion(_completion(), "free", "r")
    assert free.payload.sampling.max_tokens == 996 and free.num_reserved_tokens == 4 + 16   # the default reserve
    given = await local.prepare_completion(_completion(max_tokens=500), "b", "r")
    assert given.payload.sampling.max_tokens == 500 and given.num_reserved_tokens == 504   # the budget judges it


async def test_a_chat_request_without_max_tokens_is_capped_per_choice():
    from gateway.prompt_token_cache import PromptTokenCache
    local = _backend({"b": 300}.get)
    local.prompt_tokens = PromptTokenCache(local.engine.tokenizer)
    request = validate(ChatCompletionRequest, {"model": "plain", "n": 3,
                                               "messages": [{"role": "user", "content": "hi"}]})
    prepared = with_choices(await local.prepare_chat(request, "b", "r"), 3)
    share = (300 - prepared.num_prompt_tokens) // 3
    assert prepared.payload.sampling.max_tokens == share
    assert prepared.num_reserved_tokens == prepared.num_prompt_tokens + 3 * share <= 300


async def test_a_request_the_budget_cannot_fit_is_refused_at_admission():
    limiters = Limiters({"b": LimitsConfig(token_budget=5)})
    local = _backend(limiters.budget_room)
    prepared = with_choices(await local.prepare_completion(_completion(n=2), "b", "r"), 2)
    assert prepared.num_reserved_tokens == 4 + 2 * 1   # a share of at least one token each: over the 5 left
    with pytest.raises(ApiError) as caught:
        await limiters["b"].acquire(prepared.num_reserved_tokens)
    assert caught.value.code == "insufficient_quota"


async def test_a_capped_run_of_the_tiny_model_finishes_length_within_the_budget():
    """The real engine (about 12 s to start): EOS banned, no max_tokens, budget 40."""
    from gateway.backend import Finished
    limiters = Limiters({"b": LimitsConfig(token_budget=40)})
    local = LocalBackend(LocalModelConfig(name="m", path="tiny", num_workers=1),
                         tenant_budget_room=limiters.budget_room)
    await local.start()
    try:
        request = _completion(model="m", prompt="Once upon a time", ignore_eos=True, temperature=0)
        prepared = with_choices(await local.prepare_completion(request, "b", "r"), None)
        ticket = await limiters["b"].acquire(prepared.num_reserved_tokens)
        finishes = [event async for event in run_choices(local, prepared) if isinstance(event, Finished)]
    finally:
        await local.stop()
    [finished] = finishes
    usage = finished.usage
    limiters["b"].release(ticket, usage.num_prompt_tokens + usage.num_completion_tokens)
    assert finished.finish_reason == "length"
    assert usage.num_prompt_tokens + usage.num_completion_tokens == 40 == limiters["b"].num_spent_tokens
