"""The two service tiers of a queue: every default request before any flex one."""
from __future__ import annotations

import random

import pytest

from shards.fair_queue import PushResult
from shards.tiered_queue import TieredQueue


def test_tiered_queue_serves_the_default_tier_before_the_flex_tier_whatever_the_arrival():
    queue = TieredQueue()
    queue.push("batch", "f0", "f0", 10.0, flex=True)
    queue.push("batch", "f1", "f1", 10.0, flex=True)
    queue.push("agent", "d0", "d0", 10.0)
    queue.push("batch", "d1", "d1", 10.0)   # the batch tenant's own default request passes its flex ones
    assert [queue.pop() for _ in range(5)] == ["d0", "d1", "f0", "f1", None]


def test_tiered_queue_serves_flex_when_no_default_head_may_be_served():
    queue = TieredQueue()
    queue.push("a", "d0", "d0", 10.0)
    queue.push("b", "f0", "f0", 10.0, flex=True)
    assert queue.pop_first(lambda tenant, item: tenant == "b") == "f0"
    assert queue.pop_first(lambda tenant, item: item == "d0") == "d0"
    assert len(queue) == 0 and queue.tenants() == []


def test_tiered_queue_bounds_count_both_tiers_and_a_retry_goes_past_them():
    queue = TieredQueue(max_per_tenant=2, max_total=3)
    assert queue.push("a", "d0", "d0", 1.0) is PushResult.ADMITTED
    assert queue.push("a", "f0", "f0", 1.0, flex=True) is PushResult.ADMITTED
    assert queue.push("a", "f1", "f1", 1.0, flex=True) is PushResult.TENANT_FULL
    assert queue.push("b", "f2", "f2", 1.0, flex=True) is PushResult.ADMITTED
    assert queue.push("c", "d1", "d1", 1.0) is PushResult.QUEUE_FULL
    assert "f1" not in queue and len(queue) == 3 and queue.num_queued("a") == 2
    queue.push_front("c", "retry", "retry", flex=True)
    assert len(queue) == 4 and queue.tenants() == ["a", "b", "c"]
    with pytest.raises(ValueError):
        queue.push("a", "retry", "again", 1.0)
    assert [queue.pop() for _ in range(4)] == ["d0", "retry", "f0", "f2"]


def test_tiered_queue_remove_finds_a_key_in_either_tier_keeping_the_order():
    queue = TieredQueue()
    for i in range(3):
        queue.push("t", f"d{i}", f"d{i}", 1.0)
        queue.push("t", f"f{i}", f"f{i}", 1.0, flex=True)
    assert queue.remove("f1") == "f1" and queue.remove("d1") == "d1" and queue.remove("nope") is None
    assert list(queue) == ["d0", "d2", "f0", "f2"]
    assert [queue.pop() for _ in range(4)] == ["d0", "d2", "f0", "f2"]


def test_tiered_queue_within_each_tier_shares_by_weight_and_keeps_each_tenants_order():
    """Invariant on a random mix: the default tier drains first; within a tier the
    service is weighted fair (tenant a, weight 2, gets two for each of b's while both
    are backlogged) and each tenant's entries leave in arrival order."""
    rng = random.Random(7)
    queue = TieredQueue({"a": 2.0, "b": 1.0})
    pushed = {}
    for n in range(200):
        tenant, flex = rng.choice("ab"), rng.random() < 0.5
        key = f"{'f' if flex else 'd'}-{tenant}-{n}"
        queue.push(tenant, key, key, 1.0, flex=flex)
        pushed.setdefault((tenant, flex), []).append(key)
    served = [queue.pop() for _ in range(200)]
    tiers = [key[0] for key in served]
    assert tiers == sorted(tiers)   # every "d" before every "f"
    for (tenant, flex), keys in pushed.items():
        assert [k for k in served if k.startswith(f"{'f' if flex else 'd'}-{tenant}-")] == keys
    first_default = served[:30]
    assert sum(k.startswith("d-a") for k in first_default) == pytest.approx(20, abs=1)


def test_tiered_queue_flex_fills_at_most_half_of_each_bound_so_default_always_finds_room():
    queue = TieredQueue(max_per_tenant=4, max_total=6)
    verdicts = [queue.push("batch", f"f{i}", i, 1.0, flex=True) for i in range(3)]
    assert verdicts == [PushResult.ADMITTED, PushResult.ADMITTED, PushResult.TENANT_FULL]
    assert queue.push("other", "g0", 0, 1.0, flex=True) is PushResult.ADMITTED
    assert queue.push("other", "g1", 1, 1.0, flex=True) is PushResult.QUEUE_FULL   # 3 of 6 are flex
    assert queue.push("batch", "d0", 0, 1.0) is PushResult.ADMITTED   # the tenant's own default request too
    assert queue.push("batch", "d1", 1, 1.0) is PushResult.ADMITTED
    assert queue.push("batch", "d2", 2, 1.0) is PushResult.TENANT_FULL   # 4 of its 4
    assert queue.push("agent", "a0", 0, 1.0) is PushResult.ADMITTED
    assert queue.push("agent", "a1", 1, 1.0) is PushResult.QUEUE_FULL   # 6 of 6
