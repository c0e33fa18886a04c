"""A reload (SIGHUP) keeps each per-minute bucket's level: what a tenant spent or reserved
in the window stays spent, whatever else of its limits changed; a resized bucket keeps its
level, clamped to its new size; a new one starts full."""
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


async def test_a_resized_bucket_keeps_its_level_clamped_and_a_new_one_starts_full():
    clock = Clock()
    limiter = TenantLimiter("t", LimitsConfig(requests_per_minute=10, tokens_per_minute=2000), clock=clock)
    await spend_requests(limiter, 4)   # 6 requests and 1960 tokens left
    ticket = await limiter.acquire(500)   # in flight: its reservation stays taken across the reload
    limiter.retune(LimitsConfig(requests_per_minute=20, tokens_per_minute=1000))
    assert remaining(limiter, "requests") == 5   # kept, and now refills at 20 per minute
    assert limiter.rate_limit_headers()["x-ratelimit-limit-requests"] == "20"
    assert remaining(limiter, "tokens") == 1000   # 1460 kept, clamped to the new size
    limiter.release(ticket, 100)   # trued up into the new bucket
    assert remaining(limiter, "tokens") == 1000
    clock.now_s += 3.0   # 20 per minute: one more request
    assert remaining(limiter, "requests") == 6
    limiter.retune(LimitsConfig(requests_per_minute=2))
    assert remaining(limiter, "requests") == 2 and "x-ratelimit-limit-tokens" not in limiter.rate_limit_headers()
    limiter.retune(LimitsConfig(requests_per_minute=2, tokens_per_minute=300))
    assert remaining(limiter, "tokens") == 300   # a limit it did not have: nothing spent against it yet
