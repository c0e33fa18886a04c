"""Every tenant's limiter across reloads (gateway/limiters.py)."""
import asyncio

import pytest

from gateway.config import LimitsConfig
from gateway.errors import ApiError
from gateway.limiters import Limiters


async def test_retuned_limits_keep_running_queued_and_spent_and_admit_waiters_a_raise_makes_room_for():
    limiters = Limiters({"t": LimitsConfig(max_concurrent=1, max_queued=4, token_budget=100), "gone": LimitsConfig()})
    limiter = limiters["t"]
    first = await limiter.acquire(10)
    waiting = [asyncio.create_task(limiter.acquire(10)) for _ in range(3)]
    await asyncio.sleep(0)
    assert limiter.num_queued == 3
    gone = await limiters["gone"].acquire(5)
    limiters.update({"t": LimitsConfig(max_concurrent=3, max_queued=4, token_budget=100, requests_per_minute=60),
                     "new": LimitsConfig(max_concurrent=2)})
    assert limiters["t"] is limiter   # the same live state, retuned
    await asyncio.wait(waiting, timeout=0.5)
    assert [task.done() for task in waiting] == [True, True, False]   # two slots more: two admitted
    assert (limiter.num_active, limiter.num_queued, limiter.num_reserved_tokens) == (3, 1, 40)
    assert sorted(name for name, _ in limiters.items()) == ["new", "t"]
    limiters["gone"].release(gone, 5)   # a removed tenant's running request still releases
    assert limiters["gone"].num_active == 0 and limiters["gone"].num_spent_tokens == 5
    limiter.release(first, 10)
    tickets = [await task for task in waiting]
    for ticket in tickets:
        limiter.release(ticket, 10)
    assert limiter.num_spent_tokens == 40 and limiter.num_active == 0
    with pytest.raises(ApiError) as caught:   # the budget counts what was spent before the reload
        await limiter.acquire(61)
    assert caught.value.code == "insufficient_quota"
    limiters.update({"t": limiter.limits, "gone": LimitsConfig()})
    assert limiters["gone"].num_spent_tokens == 5   # back: its state too
    assert sorted(name for name, _ in limiters.items()) == ["gone", "t"]   # "new" left: not listed
    with pytest.raises(KeyError):
        limiters["never configured"]


async def test_a_lowered_max_concurrent_holds_waiters_back_until_the_running_fall_below_it():
    limiters = Limiters({"t": LimitsConfig(max_concurrent=3, max_queued=4)})
    limiter = limiters["t"]
    running = [await limiter.acquire(1) for _ in range(3)]
    waiting = asyncio.create_task(limiter.acquire(1))
    await asyncio.sleep(0)
    limiters.update({"t": LimitsConfig(max_concurrent=1, max_queued=4)})
    limiter.release(running[0], 1)
    limiter.release(running[1], 1)
    await asyncio.sleep(0)
    assert (limiter.num_active, limiter.num_queued, waiting.done()) == (1, 1, False)   # 1 running: the cap
    limiter.release(running[2], 1)
    ticket = await asyncio.wait_for(waiting, 1)
    assert ticket.holds_slot and limiter.num_active == 1
