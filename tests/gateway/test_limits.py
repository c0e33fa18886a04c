import asyncio

import pytest

from gateway.config import LimitsConfig
from gateway.errors import ApiError
from gateway.limits import TenantLimiter
from gateway.token_buckets import TokenBucket, duration_text


class Clock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def test_token_bucket_refills_and_reports_wait():
    bucket = TokenBucket.per_minute(60, now_s=0.0)
    bucket.level = 0.0
    assert bucket.seconds_until(3) == pytest.approx(3.0)
    bucket.refill(2.0)
    assert bucket.level == pytest.approx(2.0)
    assert bucket.seconds_until(61) is None
    bucket.refill(1000.0)
    assert bucket.level == 60.0


async def test_limiter_requests_per_minute_then_retry_after():
    clock = Clock()
    limiter = TenantLimiter("t", LimitsConfig(requests_per_minute=2), clock=clock)
    for _ in range(2):
        limiter.release(await limiter.acquire(10), 10)
    with pytest.raises(ApiError) as caught:
        await limiter.acquire(10)
    assert caught.value.status == 429 and caught.value.code == "rate_limit_exceeded"
    assert 1 <= int(caught.value.headers["Retry-After"]) <= 60
    clock.now_s += 30.0
    limiter.release(await limiter.acquire(10), 10)


@pytest.mark.parametrize("seconds,text", [(0, "0s"), (0.0004, "0s"), (0.02, "20ms"), (0.999, "999ms"), (1, "1s"),
                                          (1.5, "1.5s"), (90, "1m30s"), (360, "6m0s"), (3723.5, "1h2m3.5s")])
def test_waits_are_written_as_openai_writes_its_resets(seconds, text):
    assert duration_text(seconds) == text


async def test_rate_limit_headers_report_each_per_minute_bucket_as_it_stands():
    clock = Clock()
    limiter = TenantLimiter("t", LimitsConfig(requests_per_minute=60, tokens_per_minute=600), clock=clock)
    assert limiter.rate_limit_headers() == {
        "x-ratelimit-limit-requests": "60", "x-ratelimit-remaining-requests": "60", "x-ratelimit-reset-requests": "0s",
        "x-ratelimit-limit-tokens": "600", "x-ratelimit-remaining-tokens": "600", "x-ratelimit-reset-tokens": "0s"}
    ticket = await limiter.acquire(300)   # one request, 300 tokens reserved
    headers = limiter.rate_limit_headers()
    assert (headers["x-ratelimit-remaining-requests"], headers["x-ratelimit-reset-requests"]) == ("59", "1s")
    assert (headers["x-ratelimit-remaining-tokens"], headers["x-ratelimit-reset-tokens"]) == ("300", "30s")
    limiter.release(ticket, 100)           # used 100: 200 come back
    clock.now_s += 0.5
    headers = limiter.rate_limit_headers()
    assert (headers["x-ratelimit-remaining-tokens"], headers["x-ratelimit-reset-tokens"]) == ("505", "9.5s")
    assert TenantLimiter("u", LimitsConfig(max_concurrent=2)).rate_limit_headers() == {}   # no per-minute limit
    with pytest.raises(ApiError) as caught:
        await limiter.acquire(700)         # refused: the 429 carries them too
    assert caught.value.headers["x-ratelimit-remaining-tokens"] == "505"


async def test_limiter_tokens_reserved_then_trued_up():
    clock = Clock()
    limiter = TenantLimiter("t", LimitsConfig(tokens_per_minute=100), clock=clock)
    ticket = await limiter.acquire(80)
    with pytest.raises(ApiError):
        await limiter.acquire(30)          # 80 reserved, 20 left
    limiter.release(ticket, 20)            # used only 20: 60 come back
    limiter.release(await limiter.acquire(70), 70)
    with pytest.raises(ApiError) as caught:
        await limiter.acquire(101)         # can never fit
    assert caught.value.headers["x-should-retry"] == "false"
    assert "Retry-After" not in caught.value.headers   # no wait makes it fit (QA99: it said 60)
    assert caught.value.message == ("Request too large for tenant 't': it may use 101 tokens, above the limit of 100 "
                                    "tokens per minute. The input or output tokens must be reduced in order to run "
                                    "successfully.")   # OpenAI's words; no max_tokens, which embeddings lack (QA144)


async def test_limiter_budget_is_a_distinct_error():
    limiter = TenantLimiter("t", LimitsConfig(token_budget=100))
    limiter.release(await limiter.acquire(60), 90)
    with pytest.raises(ApiError) as caught:
        await limiter.acquire(20)
    assert caught.value.status == 429 and caught.value.code == "insufficient_quota"
    assert "Retry-After" not in caught.value.headers
    assert caught.value.message.startswith("This request may use up to 20 tokens, more than the 10 left of the token "
                                           "budget of tenant 't'")
    limiter.release(await limiter.acquire(10), 10)
    with pytest.raises(ApiError) as caught:
        await limiter.acquire(1)
    assert caught.value.message.startswith("Tenant 't' has used its token budget (100 of 100")


async def test_limiter_concurrency_queue_is_fifo_and_bounded():
    limiter = TenantLimiter("t", LimitsConfig(max_concurrent=1, max_queued=2))
    first = await limiter.acquire(1)
    order = []

    async def wait(tag: str):
        ticket = await limiter.acquire(1)
        order.append(tag)
        return ticket

    second = asyncio.create_task(wait("second"))
    third = asyncio.create_task(wait("third"))
    await asyncio.sleep(0)
    assert limiter.num_queued == 2
    with pytest.raises(ApiError) as caught:
        await limiter.acquire(1)
    assert caught.value.code == "rate_limit_exceeded"
    limiter.release(first, 1)
    limiter.release(await second, 1)
    limiter.release(await third, 1)
    assert order == ["second", "third"]
    assert limiter.num_active == 0 and limiter.num_queued == 0


async def test_limiter_cancelled_waiter_gives_back_its_place_and_tokens():
    limiter = TenantLimiter("t", LimitsConfig(max_concurrent=1, max_queued=1,
                                              requests_per_minute=2))
    first = await limiter.acquire(5)
    waiting = asyncio.create_task(limiter.acquire(5))
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert limiter.num_queued == 0 and limiter.num_reserved_tokens == 5
    limiter.release(first, 5)
    assert limiter.num_active == 0
    limiter.release(await limiter.acquire(5), 5)   # the cancelled request was refunded


@pytest.mark.parametrize("loop_turns", range(6))
async def test_a_waiter_cancelled_as_its_slot_arrives_is_cancelled_and_frees_the_slot(loop_turns):
    """Known hazard (QA47): on Python 3.11 `asyncio.wait_for` returned the waiter's result
    when the cancel came just after the slot was handed over: the cancelled request ran
    (a cancelled queued background response ran to the end)."""
    limiter = TenantLimiter("t", LimitsConfig(max_concurrent=1, max_queued=1))
    first = await limiter.acquire(1)
    admitted = []

    async def wait():
        admitted.append(await limiter.acquire(1))

    waiting = asyncio.create_task(wait())
    await asyncio.sleep(0)
    limiter.release(first, 1)   # the slot goes to the waiter...
    for _ in range(loop_turns):
        await asyncio.sleep(0)
    if waiting.done():   # ...which took it before the cancel came: nothing to lose
        assert admitted and limiter.num_active == 1
        return
    waiting.cancel()   # ...as its request is cancelled
    await asyncio.gather(waiting, return_exceptions=True)
    assert waiting.cancelled() and admitted == []
    assert limiter.num_active == 0 and limiter.num_queued == 0 and limiter.num_reserved_tokens == 0
    limiter.release(await limiter.acquire(1), 1)


async def test_limiter_queue_timeout_is_429():
    limiter = TenantLimiter("t", LimitsConfig(max_concurrent=1, max_queued=1),
                            queue_timeout_s=0.05)
    first = await limiter.acquire(1)
    with pytest.raises(ApiError) as caught:
        await limiter.acquire(1)
    assert caught.value.status == 429
    limiter.release(first, 1)
    assert limiter.num_active == 0


async def test_limiter_no_burst_slips_past_under_concurrency():
    limiter = TenantLimiter("t", LimitsConfig(requests_per_minute=10, max_concurrent=3,
                                              max_queued=2))
    admitted, refused, peak = [], [], [0]

    async def one():
        try:
            ticket = await limiter.acquire(1)
        except ApiError:
            refused.append(1)
            return
        peak[0] = max(peak[0], limiter.num_active)
        await asyncio.sleep(0.01)
        limiter.release(ticket, 1)
        admitted.append(1)

    await asyncio.gather(*(one() for _ in range(50)))
    assert len(admitted) == 5 and len(refused) == 45   # 3 running + 2 queued
    assert peak[0] <= 3


async def test_limiter_release_gives_the_slot_back_even_when_usage_is_garbage():
    limiter = TenantLimiter("t", LimitsConfig(max_concurrent=1, max_queued=1, token_budget=1000))
    for garbage in ("lots", -100000, 2.5, True):
        ticket = await limiter.acquire(10)
        with pytest.raises(ValueError):
            limiter.release(ticket, garbage)
        assert limiter.num_active == 0 and limiter.num_reserved_tokens == 0
    assert limiter.num_spent_tokens == 40   # each charged its reservation, none refunded
    waiting = asyncio.ensure_future(limiter.acquire(10))
    holder = await limiter.acquire(10)
    await asyncio.sleep(0)
    with pytest.raises(ValueError):
        limiter.release(holder, "lots")
    limiter.release(await asyncio.wait_for(waiting, 1), 5)   # the waiter got the slot
    assert limiter.num_active == 0 and limiter.num_spent_tokens == 55
