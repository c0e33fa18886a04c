"""QA124 defect 2: a tenant's Batch API lines took its `max_concurrent` slots and its
`max_queued` places, so its own interactive requests were refused 429 at once while its
batches ran. A batch line now never takes a place in the tenant's queue and never goes
before an interactive waiter: it takes a free slot when nobody waits, else it waits apart
and a freed slot goes to the interactive waiters first."""
import asyncio

import httpx
import pytest

from gateway.batch_retry import is_sent_again, retry_wait_s
from gateway.config import LimitsConfig
from gateway.errors import ApiError
from gateway.batch_line_turn import BATCH_LINE, BatchLineTurn
from gateway.limits import TenantLimiter


async def test_a_batch_line_waits_outside_the_queue_and_after_every_interactive_waiter():
    """Known answer, one slot and one queue place: A (interactive) runs; batch line B
    waits without taking the queue place; interactive C still gets it; when A ends the
    slot goes to C, not to B (older); when C ends, to B."""
    limiter = TenantLimiter("t", LimitsConfig(max_concurrent=1, max_queued=1))
    a = await limiter.acquire(10)
    b = asyncio.create_task(limiter.acquire(10, is_batch_line=True))
    await asyncio.sleep(0)
    assert (limiter.num_queued, limiter.num_batch_waiting, b.done()) == (0, 1, False)
    c = asyncio.create_task(limiter.acquire(10))
    await asyncio.sleep(0)
    assert (limiter.num_queued, c.done()) == (1, False)   # the queue place was free for C
    with pytest.raises(ApiError) as full:   # the queue holds interactive requests only: D is one too many
        await limiter.acquire(10)
    assert full.value.status == 429 and "1 queued" in full.value.message
    limiter.release(a, 10)
    c_ticket = await asyncio.wait_for(c, 1)
    assert not b.done() and (limiter.num_active, limiter.num_batch_waiting) == (1, 1)
    limiter.release(c_ticket, 10)
    b_ticket = await asyncio.wait_for(b, 1)
    assert (limiter.num_active, limiter.num_queued, limiter.num_batch_waiting) == (1, 0, 0)
    limiter.release(b_ticket, 10)
    assert limiter.num_active == 0 and limiter.num_reserved_tokens == 0


async def test_a_batch_line_takes_a_free_slot_at_once_and_no_early_queue_refusal():
    """A free slot means nobody waits: a batch line takes it at once. With every slot
    busy and the queue full of interactive requests, the early refusal a batch line gets
    is none (it has no queue to be refused by; it waits), an interactive request's the
    queue's; `BATCH_LINE` is what marks a line when the caller does not say."""
    free = TenantLimiter("t", LimitsConfig(max_concurrent=1))
    line_ticket = await free.acquire(10, is_batch_line=True)
    assert line_ticket.holds_slot and free.num_active == 1
    limiter = TenantLimiter("t", LimitsConfig(max_concurrent=1, max_queued=1))
    running = await limiter.acquire(10)   # (an agent's: a batch line's slot would be one more queue place)
    queued = asyncio.create_task(limiter.acquire(10))
    await asyncio.sleep(0)
    assert limiter.early_refusal(10) is not None and limiter.early_refusal(10, is_batch_line=True) is None
    marked = BATCH_LINE.set(BatchLineTurn())
    try:
        assert limiter.early_refusal(10) is None
        line = asyncio.create_task(limiter.acquire(10))   # (the task copies the context: a batch line)
    finally:
        BATCH_LINE.reset(marked)
    await asyncio.sleep(0)
    assert (limiter.num_queued, limiter.num_batch_waiting) == (1, 1)
    limiter.release(running, 10)
    queued_ticket = await asyncio.wait_for(queued, 1)
    assert not line.done()
    limiter.release(queued_ticket, 10)
    limiter.release(await asyncio.wait_for(line, 1), 10)
    assert (limiter.num_active, limiter.num_queued, limiter.num_batch_waiting) == (0, 0, 0)


async def test_a_batch_line_that_waited_too_long_is_sent_again_and_leaves_no_trace_in_the_limiter():
    """A line that found no free slot for `queue_timeout_s` is a retryable 429 (the batch
    runner sends it again after `Retry-After`, not a failed line), everything it reserved
    given back."""
    limiter = TenantLimiter("t", LimitsConfig(max_concurrent=1, requests_per_minute=10), queue_timeout_s=0.05)
    running = await limiter.acquire(10)
    with pytest.raises(ApiError) as waited:
        await limiter.acquire(10, is_batch_line=True)
    error = waited.value
    assert (error.status, error.code) == (429, "rate_limit_exceeded") and "batch" in error.message
    assert is_sent_again(error) and retry_wait_s(error.status, httpx.Headers(error.headers), error.body()) == 1.0
    assert (limiter.num_batch_waiting, limiter.num_active, limiter.num_reserved_tokens) == (0, 1, 10)
    assert limiter.rate_limit_headers()["x-ratelimit-remaining-requests"] == "9"   # its request given back
    limiter.release(running, 10)


async def test_a_running_batch_line_is_a_queue_place_for_its_tenants_requests_even_with_no_queue():
    """Known answer, two slots and no queue: two batch lines run; the tenant's agent request
    waits for the first slot a line frees instead of a 429, a second agent request gets the
    other line's slot, a third is refused (every line's slot spoken for)."""
    limiter = TenantLimiter("t", LimitsConfig(max_concurrent=2))
    lines = [await limiter.acquire(10, is_batch_line=True) for _ in range(2)]
    assert (limiter.num_active, limiter.num_batch_active) == (2, 2)
    agents = [asyncio.create_task(limiter.acquire(10)) for _ in range(2)]
    await asyncio.sleep(0)
    assert limiter.num_queued == 2 and not any(task.done() for task in agents)
    with pytest.raises(ApiError) as refused:
        await limiter.acquire(10)
    assert refused.value.status == 429
    for line, agent in zip(lines, agents):
        limiter.release(line, 10)
        limiter.release(await asyncio.wait_for(agent, 1), 10)
    assert (limiter.num_active, limiter.num_batch_active, limiter.num_queued) == (0, 0, 0)
