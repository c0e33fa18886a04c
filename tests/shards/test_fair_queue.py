"""Weighted fair queueing: known-answer orders, bounds, and the slot-sharing rule."""
from __future__ import annotations

import pytest

from shards.fair_queue import FairQueue, PushResult, fair_share, may_admit, work_cost


def _fill(queue, tenant, n, cost=10.0):
    for i in range(n):
        assert queue.push(tenant, f"{tenant}{i}", f"{tenant}{i}", cost) is PushResult.ADMITTED


def test_fair_queue_serves_backlogged_tenants_in_weight_proportion():
    queue = FairQueue({"a": 2.0, "b": 1.0})
    _fill(queue, "a", 40)
    _fill(queue, "b", 40)
    served = [queue.pop() for _ in range(30)]
    assert sum(s.startswith("a") for s in served) == 20
    assert sum(s.startswith("b") for s in served) == 10


def test_fair_queue_new_weights_apply_to_what_is_pushed_after_them():
    queue = FairQueue({"a": 1.0, "b": 1.0})
    queue.set_weights({"a": 3.0})   # b: the default weight, 1
    _fill(queue, "a", 40)
    _fill(queue, "b", 40)
    served = [queue.pop() for _ in range(40)]
    assert sum(s.startswith("a") for s in served) == 30
    with pytest.raises(ValueError):
        queue.set_weights({"a": 0.0})
    assert queue.weight("a") == 3.0


def test_fair_queue_keeps_arrival_order_within_a_tenant():
    queue = FairQueue()
    _fill(queue, "a", 5)
    _fill(queue, "b", 5)
    served = [queue.pop() for _ in range(10)]
    assert [s for s in served if s.startswith("a")] == [f"a{i}" for i in range(5)]
    assert queue.pop() is None


def test_fair_queue_newcomer_does_not_wait_behind_a_backlog():
    queue = FairQueue()
    _fill(queue, "noisy", 100)
    for _ in range(10):
        queue.pop()
    queue.push("quiet", "q0", "q0", 10.0)
    assert "q0" in [queue.pop(), queue.pop()]


def test_fair_queue_push_refuses_past_tenant_and_total_bounds():
    queue = FairQueue(max_per_tenant=2, max_total=3)
    _fill(queue, "a", 2)
    assert queue.push("a", "a9", "a9", 1.0) is PushResult.TENANT_FULL
    assert queue.push("b", "b0", "b0", 1.0) is PushResult.ADMITTED
    assert queue.push("c", "c0", "c0", 1.0) is PushResult.QUEUE_FULL
    assert len(queue) == 3 and "a9" not in queue


def test_fair_queue_remove_takes_out_one_entry_keeping_the_order():
    queue = FairQueue()
    _fill(queue, "a", 3)
    assert queue.remove("a1") == "a1"
    assert queue.remove("a1") is None
    assert [queue.pop(), queue.pop(), queue.pop()] == ["a0", "a2", None]


def test_fair_queue_push_front_is_served_first_even_when_full():
    queue = FairQueue(max_total=2)
    _fill(queue, "a", 2)
    queue.push_front("b", "retry", "retry")
    assert len(queue) == 3 and queue.pop() == "retry"


def test_fair_queue_pop_first_skips_tenants_that_cannot_be_served():
    queue = FairQueue()
    _fill(queue, "a", 2)
    _fill(queue, "b", 2)
    assert queue.pop_first(lambda tenant, item: tenant == "b") == "b0"
    assert queue.pop_first(lambda tenant, item: False) is None


def test_fair_queue_keeps_no_fifo_for_tenants_with_nothing_queued():
    """A queue that served a thousand tenants once holds nothing for them: what it
    scans before each decode step is what is queued. A tenant that drained and comes
    back is served at the current virtual time, as before."""
    queue = FairQueue()
    for i in range(1000):
        _fill(queue, f"t{i}", 1)
        if i % 2:
            assert queue.remove(f"t{i}0") == f"t{i}0"
    while queue.pop() is not None:
        pass
    assert queue.tenants() == [] and queue._queues == {}
    _fill(queue, "noisy", 6)
    queue.pop()
    _fill(queue, "t3", 1)   # back after draining: not behind noisy's backlog
    assert queue.tenants() == ["noisy", "t3"]
    assert "t30" in [queue.pop(), queue.pop()]


def test_may_admit_lets_a_tenant_under_its_share_past_the_soft_limit():
    running = {"noisy": 4}
    assert not may_admit("noisy", running, {"noisy", "quiet"}, {}, soft_limit=4, hard_limit=8)
    assert may_admit("quiet", running, {"noisy", "quiet"}, {}, soft_limit=4, hard_limit=8)
    assert not may_admit("quiet", {"noisy": 8}, {"quiet"}, {}, soft_limit=4, hard_limit=8)
    assert may_admit("noisy", {"noisy": 3}, set(), {}, soft_limit=4, hard_limit=8)
    assert not may_admit("noisy", {"noisy": 4}, {"noisy"}, {}, soft_limit=4, hard_limit=8)
    assert may_admit("quiet", {"noisy": 4, "quiet": 3}, set(), {}, soft_limit=4, hard_limit=8)
    assert not may_admit("quiet", {"noisy": 4, "quiet": 4}, set(), {}, soft_limit=4, hard_limit=8)


def test_fair_share_follows_weights():
    assert fair_share("a", {"b"}, {"a": 3.0, "b": 1.0}, 8) == 6.0


def test_work_cost_caps_the_completion_budget():
    assert work_cost(100, 10) == 110.0
    assert work_cost(100, 100_000, decode_cost_tokens=64) == 164.0


def test_may_pin_bounds_a_tenant_to_its_cache_share_once_the_cache_is_contended():
    from shards.fair_queue import may_pin

    assert may_pin("noisy", 90, {}, set(), {}, capacity=100)  # pins nothing yet: always
    assert may_pin("noisy", 20, {"noisy": 30}, set(), {}, capacity=100)  # half still free
    assert not may_pin("noisy", 20, {"noisy": 40}, {"quiet"}, {}, capacity=100)  # share is 50
    assert may_pin("quiet", 20, {"noisy": 40, "quiet": 10}, set(), {}, capacity=100)
    assert not may_pin("noisy", 20, {"noisy": 40}, set(), {}, capacity=100)  # alone: half at most
