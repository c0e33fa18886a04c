"""QA153 finding 1: a tenant's Batch API lines took requests and tokens from the same
per-minute buckets as its interactive requests, so while its batch ran its own agents got
429s (rpm 30: 7 of 10 refused). A batch line now spends only what interactive traffic
leaves: it is admitted only when, after it, each bucket keeps half its per-minute limit,
else it is a retryable 429 (the batch runner waits its `Retry-After` and sends it again).
Interactive requests are checked as before. Known answers on a fake clock."""
import httpx
import pytest

from gateway.batch_line_turn import BATCH_LINE, BatchLineTurn
from gateway.batch_retry import is_sent_again, retry_wait_s
from gateway.config import LimitsConfig
from gateway.errors import ApiError
from gateway.limits import TenantLimiter


class FakeClock:
    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


def _limiter(**limits) -> tuple[TenantLimiter, FakeClock]:
    clock = FakeClock()
    return TenantLimiter("t", LimitsConfig(**limits), clock=clock), clock


async def _refused(limiter: TenantLimiter, num_tokens: int, **kw) -> ApiError:
    with pytest.raises(ApiError) as refused:
        await limiter.acquire(num_tokens, **kw)
    return refused.value


async def test_a_batch_line_keeps_half_the_requests_per_minute_for_interactive_requests():
    """rpm 10: 4 interactive requests leave 6; a batch line needs 1 + the reserve of 5, so
    it is admitted (5 left), the next one is refused for 1 / (10/60 s) = 6 s, debiting
    nothing, while interactive requests take the other 5; 6 s later a line goes again."""
    limiter, clock = _limiter(requests_per_minute=10)
    for _ in range(4):
        limiter.release(await limiter.acquire(1), 1)
    limiter.release(await limiter.acquire(1, is_batch_line=True), 1)
    assert limiter.rate_limit_headers()["x-ratelimit-remaining-requests"] == "5"
    error = await _refused(limiter, 1, is_batch_line=True)
    assert error.status == 429 and error.code == "rate_limit_exceeded" and error.headers["Retry-After"] == "6"
    assert "half" in error.message and limiter.rate_limit_headers()["x-ratelimit-remaining-requests"] == "5"
    assert retry_wait_s(error.status, httpx.Headers(error.headers), error.body()) == 6 and is_sent_again(error)
    for _ in range(5):   # the reserve is the interactive requests'
        limiter.release(await limiter.acquire(1), 1)
    assert (await _refused(limiter, 1)).headers["Retry-After"] == "6"   # and then they are limited as before
    clock.now_s += 6 * 6.0   # 6 requests back: 6 in the bucket, one for the line beside the reserve
    limiter.release(await limiter.acquire(1, is_batch_line=True), 1)
    assert limiter.rate_limit_headers()["x-ratelimit-remaining-requests"] == "5"


async def test_a_batch_line_keeps_half_the_tokens_per_minute_for_interactive_requests():
    """tpm 1000: interactive 400 leaves 600; a 100-token line needs 100 + 500, admitted
    (500 left); the next is refused for 100 / (1000/60 s) = 6 s; an interactive request of
    500 still fits."""
    limiter, clock = _limiter(tokens_per_minute=1000)
    limiter.release(await limiter.acquire(400), 400)
    limiter.release(await limiter.acquire(100, is_batch_line=True), 100)
    error = await _refused(limiter, 100, is_batch_line=True)
    assert error.headers["Retry-After"] == "6" and "1000 tokens per minute" in error.message
    assert error.headers.get("x-should-retry") != "false" and is_sent_again(error)
    assert limiter.num_reserved_tokens == 0
    limiter.release(await limiter.acquire(500), 500)
    assert limiter.rate_limit_headers()["x-ratelimit-remaining-tokens"] == "0"
    clock.now_s += 36.0   # 600 back: 100 beside the reserve
    limiter.release(await limiter.acquire(100, is_batch_line=True), 100)


async def test_a_batch_line_larger_than_half_the_tokens_waits_for_a_full_bucket():
    """A 700-token line on tpm 1000 cannot leave 500: it goes only from a full bucket
    (interactively it needs just 700); one over the whole limit is final, as before."""
    limiter, clock = _limiter(tokens_per_minute=1000)
    limiter.release(await limiter.acquire(1), 1)
    error = await _refused(limiter, 700, is_batch_line=True)
    assert error.headers["Retry-After"] == "1"   # 1 token / (1000/60 s) = 0.06 s, rounded up
    clock.now_s += 0.1
    limiter.release(await limiter.acquire(700, is_batch_line=True), 700)
    too_large = await _refused(limiter, 1001, is_batch_line=True)
    assert too_large.headers["x-should-retry"] == "false" and not is_sent_again(too_large)


async def test_the_early_refusal_of_a_batch_line_is_its_acquire_refusal():
    """The refusal given before a prompt is rendered is the one `acquire` gives: for a
    line in a `BATCH_LINE` context it counts the reserve, for an interactive request not."""
    limiter, _ = _limiter(requests_per_minute=4)
    limiter.release(await limiter.acquire(1), 1)
    limiter.release(await limiter.acquire(1), 1)   # 2 left: an interactive request fits, a line needs 3
    assert limiter.early_refusal(10) is None
    early = limiter.early_refusal(10, is_batch_line=True)
    marked = BATCH_LINE.set(BatchLineTurn())
    try:
        from_context = limiter.early_refusal(10)
        error = await _refused(limiter, 10)
    finally:
        BATCH_LINE.reset(marked)
    assert early is not None and from_context is not None
    assert early.message == from_context.message == error.message
    assert early.headers["Retry-After"] == error.headers["Retry-After"] == "15"


def test_a_budgeted_batch_line_without_max_tokens_is_sized_to_keep_the_reserve():
    """`budget_room` of a line that sets no `max_tokens` is at most what a full tokens/minute
    bucket holds beside the reserve (so it never takes the agents' half); an interactive
    request's is what the bucket holds now."""
    limiter, _ = _limiter(tokens_per_minute=1000, token_budget=100_000)
    assert limiter.budget_room() == 1000
    marked = BATCH_LINE.set(BatchLineTurn())
    try:
        assert limiter.budget_room() == 500
    finally:
        BATCH_LINE.reset(marked)
