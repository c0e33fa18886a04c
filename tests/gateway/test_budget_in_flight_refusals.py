"""QA97 findings 1, 2 and 4: a budgeted request over the budget only while others are in
flight is a retryable 429 (`rate_limit_exceeded`, Retry-After), not a final
`insufficient_quota`; a final refusal reports what is spent; a tokens/minute refusal's
Retry-After is the whole wait, however long."""
import pytest

from gateway.budget_share import run_share
from gateway.config import LimitsConfig
from gateway.errors import ApiError, rate_limited
from gateway.limiters import Limiters
from gateway.limits import TenantLimiter


class Clock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


async def _refusal(limiter: TenantLimiter, num_tokens: int) -> ApiError:
    with pytest.raises(ApiError) as caught:
        await limiter.acquire(num_tokens)
    return caught.value


async def test_a_request_that_fits_once_the_running_ones_settle_is_retryable():
    """QA97 inflight_quota.py: A reserves 721 of 1000 (nothing spent), B asks 300."""
    limiter = TenantLimiter("d", LimitsConfig(token_budget=1000))
    running = await limiter.acquire(721)
    error = await _refusal(limiter, 300)
    assert (error.status, error.code, error.type) == (429, "rate_limit_exceeded", "rate_limit_error")
    assert error.headers["Retry-After"] == "1" and "x-should-retry" not in error.headers
    assert "0 of 1000 tokens are spent and 721 reserved by running requests" in error.message
    assert "has used its token budget" not in error.message
    assert (limiter.num_reserved_tokens, limiter.num_spent_tokens) == (721, 0)   # the refusal debits nothing
    limiter.release(running, 24)   # A's client left early
    limiter.release(await limiter.acquire(300), 300)   # the same B, retried: admitted
    assert limiter.num_spent_tokens == 324


async def test_only_a_request_the_spent_tokens_leave_no_room_for_is_final():
    limiter = TenantLimiter("t", LimitsConfig(token_budget=100))
    limiter.release(await limiter.acquire(90), 90)
    running = await limiter.acquire(5)
    error = await _refusal(limiter, 20)   # 90 spent + 20 > 100: waiting cannot help
    assert (error.code, error.type, error.headers.get("x-should-retry")) == (
        "insufficient_quota", "insufficient_quota", "false")
    assert "Retry-After" not in error.headers
    assert error.message == ("This request may use up to 20 tokens, more than the 10 left of the token budget of "
                             "tenant 't' (90 of 100 spent; 5 more are reserved by running requests).")
    assert (await _refusal(limiter, 6)).code == "rate_limit_exceeded"   # 90 + 6 fits once the 5 settle
    limiter.release(running, 10)
    error = await _refusal(limiter, 1)
    assert error.code == "insufficient_quota"
    assert error.message == ("Tenant 't' has used its token budget (100 of 100 tokens spent; this request needs "
                             "up to 1).")


async def test_an_open_ended_request_makes_the_next_one_wait_not_fail():
    """QA97 conc.py: requests without max_tokens each reserve their share of all that is
    left; those sent while one runs are retryable, and each retry is sized afresh."""
    limiters = Limiters({"d": LimitsConfig(token_budget=1000)})
    limiter, num_prompt = limiters["d"], 20

    def reservation() -> int:
        return num_prompt + run_share(limiters.budget_room("d"), num_prompt, 1)

    first = await limiter.acquire(reservation())
    assert limiter.num_reserved_tokens == 1000
    for _ in range(19):
        assert (await _refusal(limiter, reservation())).code == "rate_limit_exceeded"
    limiter.release(first, 45)
    second = await limiter.acquire(reservation())   # sized to what is left now
    assert second.num_reserved_tokens == 955
    limiter.release(second, 38)
    assert limiter.num_spent_tokens == 83 <= 1000


async def test_retry_after_is_the_whole_wait_of_a_tokens_per_minute_bucket_in_debt():
    """QA97 retry_after.py: 300 tokens/min; a stream reserved 84 but ran 600 (the bucket is
    in debt by 300); a request of 270 needs (270 + 300) / 5 = 114 s, not 60."""
    clock = Clock()
    limiter = TenantLimiter("c", LimitsConfig(tokens_per_minute=300), clock=clock)
    limiter.release(await limiter.acquire(84), 600)
    error = await _refusal(limiter, 270)
    assert error.code == "rate_limit_exceeded" and error.headers["Retry-After"] == "114"
    assert error.headers["x-ratelimit-reset-tokens"] == "2m0s"   # until full: no sooner than the retry
    assert error.headers["x-ratelimit-remaining-tokens"] == "0"
    clock.now_s += 113.0
    assert int((await _refusal(limiter, 270)).headers["Retry-After"]) == 1   # not overstated either
    clock.now_s += 1.0
    limiter.release(await limiter.acquire(270), 270)   # a client that honoured it is admitted


def test_rate_limited_rounds_up_with_a_floor_of_one_second_only():
    assert [rate_limited("m", s).headers["Retry-After"] for s in (0, 0.2, 1, 59.1, 60, 83.4, 3600)] == [
        "1", "1", "1", "60", "60", "84", "3600"]
