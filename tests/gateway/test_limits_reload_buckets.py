"""A reload (SIGHUP) keeps what a tenant spent or reserved in each per-minute bucket's
window, whatever else of its limits changed: a resized bucket is its new size less that
(at least 0, or the debt it was in), so a lowered limit hands out no more and a raised
one gives its room at once (FI150: the level was kept instead); a new one starts full."""
from __future__ import annotations

import dataclasses

import pytest

from gateway.config import LimitsConfig
from gateway.errors import ApiError
from gateway.limiters import Limiters
from gateway.limits import TenantLimiter


class Clock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def remaining(limiter: TenantLimiter, kind: str) -> int:
    return int(limiter.rate_limit_headers()[f"x-ratelimit-remaining-{kind}"])


async def spend_requests(limiter: TenantLimiter, count: int) -> None:
    for _ in range(count):
        limiter.release(await limiter.acquire(10), 10)


async def test_changing_another_limit_leaves_the_requests_per_minute_spent():
    clock = Clock()
    limits = LimitsConfig(requests_per_minute=6, tokens_per_minute=2000)
    limiters = Limiters({"rpm": limits}, clock=clock)
    limiter = limiters["rpm"]
    await spend_requests(limiter, 6)
    with pytest.raises(ApiError):
        await limiter.acquire(10)
    assert remaining(limiter, "tokens") == 1940
    for reload in range(2):   # a config-management loop that reloads again and again
        limiters.update({"rpm": dataclasses.replace(limits, max_queued=3 + reload)})
        assert limiters["rpm"] is limiter
        assert remaining(limiter, "requests") == 0
        assert remaining(limiter, "tokens") == 1940
        with pytest.raises(ApiError) as refused:
            await limiter.acquire(10)
        assert refused.value.code == "rate_limit_exceeded"
    clock.now_s += 10.0   # one request's refill (6 per minute)
    await spend_requests(limiter, 1)
    with pytest.raises(ApiError):
        await limiter.acquire(10)


async def test_a_resized_bucket_keeps_what_was_spent_clamped_and_a_new_one_starts_full():
    clock = Clock()
    limiter = TenantLimiter("t", LimitsConfig(requests_per_minute=10, tokens_per_minute=2000), clock=clock)
    await spend_requests(limiter, 4)   # 4 requests and 40 tokens spent
    ticket = await limiter.acquire(500)   # in flight: its reservation stays taken across the reload
    limiter.retune(LimitsConfig(requests_per_minute=20, tokens_per_minute=1000))
    assert remaining(limiter, "requests") == 15   # 5 spent kept, and now refills at 20 per minute
    assert limiter.rate_limit_headers()["x-ratelimit-limit-requests"] == "20"
    assert remaining(limiter, "tokens") == 460   # 540 spent or reserved kept
    limiter.release(ticket, 100)   # trued up into the new bucket
    assert remaining(limiter, "tokens") == 860
    clock.now_s += 3.0   # 20 per minute: one more request
    assert remaining(limiter, "requests") == 16
    limiter.retune(LimitsConfig(requests_per_minute=2))   # 4 spent: clamped to the new size
    assert remaining(limiter, "requests") == 0 and "x-ratelimit-limit-tokens" not in limiter.rate_limit_headers()
    limiter.retune(LimitsConfig(requests_per_minute=2, tokens_per_minute=300))
    assert remaining(limiter, "tokens") == 300   # a limit it did not have: nothing spent against it yet


async def test_a_lowered_requests_per_minute_keeps_what_was_spent():
    """QA225 F2: 10 → 6 after 5 spent let 5 more through (10 in ~2 s); 1 is left."""
    clock = Clock()
    limiters = Limiters({"eps": LimitsConfig(requests_per_minute=10)}, clock=clock)
    limiter = limiters["eps"]
    await spend_requests(limiter, 5)
    limiters.update({"eps": LimitsConfig(requests_per_minute=6)})
    assert remaining(limiter, "requests") == 1
    await spend_requests(limiter, 1)
    with pytest.raises(ApiError) as refused:
        await limiter.acquire(10)
    assert refused.value.code == "rate_limit_exceeded"


async def test_a_raised_requests_per_minute_gives_its_room_at_once():
    """QA225 F2: 2 → 10 after both were spent kept the tenant blocked; 8 are left."""
    clock = Clock()
    limiters = Limiters({"beta": LimitsConfig(requests_per_minute=2)}, clock=clock)
    limiter = limiters["beta"]
    await spend_requests(limiter, 2)
    with pytest.raises(ApiError):
        await limiter.acquire(10)
    limiters.update({"beta": LimitsConfig(requests_per_minute=10)})
    assert remaining(limiter, "requests") == 8
    await spend_requests(limiter, 8)
    with pytest.raises(ApiError):
        await limiter.acquire(10)


@pytest.mark.parametrize("new_size, left", [(2000, 1700), (500, 200), (300, 0), (200, 0)])
async def test_a_resized_tokens_per_minute_keeps_what_was_spent(new_size, left):
    clock = Clock()
    limiter = TenantLimiter("t", LimitsConfig(tokens_per_minute=1000), clock=clock)
    limiter.release(await limiter.acquire(300), 300)
    limiter.retune(LimitsConfig(tokens_per_minute=new_size))
    assert remaining(limiter, "tokens") == left


@pytest.mark.parametrize("new_size, level", [(50, -40), (120, -20), (200, 60)])
async def test_a_bucket_in_debt_keeps_its_debt_when_resized(new_size, level):
    """A request that used more than it reserved left the bucket in debt: a lowered limit
    neither forgives nor deepens it, a raised one counts all that was spent."""
    clock = Clock()
    limiter = TenantLimiter("t", LimitsConfig(tokens_per_minute=100), clock=clock)
    limiter.release(await limiter.acquire(10), 140)   # 140 spent of 100: 40 in debt
    limiter.retune(LimitsConfig(tokens_per_minute=new_size))
    assert limiter._tokens.level == level
