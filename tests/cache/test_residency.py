"""Tier moves, evictions, events and clear, driven through the BlockManager API."""
from __future__ import annotations

import pytest

from cache.block_manager import BlockManager
from cache.events import AllCleared, BlockRemoved, BlockStored
from cache.forecast import Forecast
from cache.lru import LRUPolicy
from cache.mover import CountingMover
from cache.policy import CacheActions
from cache.tiers import Tier


def _serve(manager: BlockManager, tenant: str, tokens: list[int]) -> list[int]:
    hashes, blocks = manager.hash_prompt(tenant, tokens)
    held = manager.acquire(tenant, None, manager.match(tenant, hashes, blocks), len(tokens))
    return held + [block_id for block_id, _ in manager.commit(tenant, None, hashes, blocks, len(held))]


def _manager(**kwargs) -> tuple[BlockManager, CountingMover]:
    mover = CountingMover(bytes_per_block=64)
    options = dict(num_hot_blocks=4, num_host_blocks=2, block_size=2, bytes_per_block=64, mover=mover)
    options.update(kwargs)
    return BlockManager(**options), mover


def test_residency_demote_promote_drop_accounting() -> None:
    manager, mover = _manager()
    manager.release(_serve(manager, "t", [1, 2, 3, 4]))
    hashes, blocks = manager.hash_prompt("t", [1, 2, 3, 4])

    host_id = manager.demote(1)
    assert host_id == 0
    stats = manager.stats()
    assert (stats.tiers[Tier.HOT].used_bytes, stats.tiers[Tier.HOST].used_bytes) == (64, 64)
    assert (stats.tenants["t"].num_hot_blocks, stats.tenants["t"].num_host_blocks) == (1, 1)
    assert manager.match("t", hashes, blocks).host_block_ids == [0]

    hot_id = manager.promote(host_id)
    assert hot_id is not None and manager.block(Tier.HOST, host_id) is None
    assert manager.stats().tiers[Tier.HOST].used_bytes == 0
    assert mover.num_copies == {(Tier.HOT, Tier.HOST): 1, (Tier.HOST, Tier.HOT): 1}
    assert mover.num_copied_bytes == 128

    manager.drop(hot_id, Tier.HOT)
    stats = manager.stats()
    assert stats.tiers[Tier.HOT].used_bytes == 64 and stats.tiers[Tier.HOT].num_cached_blocks == 1
    assert (stats.num_demotions, stats.num_promotions, stats.num_drops) == (1, 1, 1)
    assert manager.match("t", hashes, blocks).hot_block_ids == [0]


def test_residency_explicit_moves_refuse_blocks_in_use() -> None:
    manager, _ = _manager()
    held = _serve(manager, "t", [1, 2])
    assert not manager.can_demote(held[0])
    with pytest.raises(ValueError):
        manager.demote(held[0])
    with pytest.raises(ValueError):
        manager.drop(held[0], Tier.HOT)
    with pytest.raises(ValueError):
        manager.promote(0)


def test_residency_demote_without_host_tier_returns_none() -> None:
    manager, _ = _manager(num_host_blocks=0)
    manager.release(_serve(manager, "t", [1, 2]))
    assert not manager.can_demote(0)
    assert manager.demote(0) is None
    assert manager.block(Tier.HOT, 0) is not None


def test_residency_promote_without_hot_room_returns_none() -> None:
    manager, _ = _manager(num_hot_blocks=1)
    manager.release(_serve(manager, "t", [1, 2]))
    manager.demote(0)
    held = _serve(manager, "t", [5, 6])
    assert manager.promote(0) is None
    assert manager.block(Tier.HOST, 0) is not None
    manager.release(held)
    assert manager.promote(0) == 0  # now the [5, 6] block is demoted to make room
    assert [block.tokens for block in manager.blocks(Tier.HOST)] == [(5, 6)]


def test_residency_eviction_demotes_then_host_victim_is_dropped() -> None:
    manager, _ = _manager(num_hot_blocks=2, num_host_blocks=1)
    manager.release(_serve(manager, "t", [1, 1, 2, 2]))
    manager.take_events()
    first = manager.hash_prompt("t", [1, 1, 2, 2])[0]
    manager.release(_serve(manager, "t", [7, 7]))
    assert manager.take_events() == [
        BlockRemoved((first[1],), Tier.HOT),
        BlockStored((first[1],), Tier.HOST, "t", first[0]),
        BlockStored((manager.hash_prompt("t", [7, 7])[0][0],), Tier.HOT, "t", None),
    ]
    manager.release(_serve(manager, "t", [8, 8]))
    events = manager.take_events()
    assert events[0] == BlockRemoved((first[1],), Tier.HOST)  # host full: its LRU block goes
    assert events[1:3] == [BlockRemoved((first[0],), Tier.HOT), BlockStored((first[0],), Tier.HOST, "t", None)]
    stats = manager.stats()
    assert (stats.tiers[Tier.HOT].num_evictions, stats.tiers[Tier.HOST].num_evictions) == (2, 1)


def test_residency_acquire_promotes_host_run() -> None:
    manager, mover = _manager()
    manager.release(_serve(manager, "t", [1, 2, 3, 4, 5, 6]))
    manager.demote(2)
    manager.demote(1)
    hashes, blocks = manager.hash_prompt("t", [1, 2, 3, 4, 5, 6])
    match = manager.match("t", hashes, blocks)
    assert (match.hot_block_ids, match.num_host_tokens) == ([0], 4)
    held = manager.acquire("t", None, match, 7)
    assert len(held) == 3 and held[0] == 0
    assert [manager.block(Tier.HOT, block_id).hash for block_id in held] == hashes
    tenant = manager.stats().tenants["t"]
    assert (tenant.num_hot_hit_tokens, tenant.num_host_hit_tokens, tenant.num_miss_tokens) == (2, 4, 6 + 1)
    assert mover.num_copies[(Tier.HOST, Tier.HOT)] == 2


def test_residency_acquire_promotion_stops_without_room() -> None:
    manager, _ = _manager(num_hot_blocks=2, num_host_blocks=2)
    manager.release(_serve(manager, "t", [1, 2, 3, 4]))
    manager.demote(1)
    manager.demote(0)
    other = _serve(manager, "t", [7, 7, 8, 8])
    hashes, blocks = manager.hash_prompt("t", [1, 2, 3, 4])
    assert manager.acquire("t", None, manager.match("t", hashes, blocks), 4) == []
    assert [manager.block(Tier.HOST, i).ref_count for i in (0, 1)] == [0, 0]
    assert manager.stats().tenants["t"].num_miss_tokens == 3 * 4
    manager.release(other)


def test_residency_store_events_batch_a_chain_run() -> None:
    manager, _ = _manager(num_hot_blocks=8)
    hashes, _ = manager.hash_prompt("t", list(range(6)))
    manager.release(_serve(manager, "t", list(range(6))))
    assert manager.take_events() == [BlockStored(tuple(hashes), Tier.HOT, "t", None)]
    longer, _ = manager.hash_prompt("t", list(range(10)))
    manager.release(_serve(manager, "t", list(range(10))))
    assert manager.take_events() == [BlockStored(tuple(longer[3:]), Tier.HOT, "t", longer[2])]


def test_residency_clear_forgets_unreferenced_and_privatizes_held() -> None:
    manager, _ = _manager()
    held = _serve(manager, "t", [1, 2])
    manager.release(_serve(manager, "t", [3, 4]))
    manager.demote(1)
    manager.take_events()
    manager.clear()
    assert manager.take_events() == [AllCleared()]
    assert manager.num_used_hot_blocks == 1 and manager.num_used_host_blocks == 0
    hashes, blocks = manager.hash_prompt("t", [1, 2])
    assert manager.match("t", hashes, blocks).num_blocks == 0
    manager.release(held)
    assert manager.num_used_hot_blocks == 0
    assert manager.stats().tiers[Tier.HOT].num_cached_blocks == 0


def test_residency_event_queue_bound_counts_dropped() -> None:
    manager, _ = _manager(num_hot_blocks=8, max_pending_events=2)
    for i in range(3):
        manager.release(_serve(manager, "t", [i, i]))
    assert len(manager.take_events()) == 2
    assert manager.stats().num_dropped_events == 1


class DemoteOnTickPolicy(LRUPolicy):
    """A policy that acts ahead of time: demotes every evictable HOT block on tick."""

    def __init__(self) -> None:
        super().__init__()
        self.forecasts: list[Forecast] = []
        self.ticks: list[float] = []

    def apply(self, forecast: Forecast, actions: CacheActions) -> None:
        self.forecasts.append(forecast)

    def tick(self, now_s: float, actions: CacheActions) -> None:
        self.ticks.append(now_s)
        for block_id in list(self._evictable[Tier.HOT]):
            if actions.can_demote(block_id):
                actions.demote(block_id)


def test_residency_policy_acts_through_tick_and_gets_forecasts() -> None:
    policy = DemoteOnTickPolicy()
    manager, _ = _manager(policy=policy, clock=lambda: 42.0)
    held = _serve(manager, "t", [1, 2])
    manager.release(_serve(manager, "t", [3, 4, 5, 6]))
    forecast = Forecast(tenant="t", session="s", made_at_s=1.0)
    manager.apply(forecast)
    manager.tick()
    manager.tick(50.0)
    assert policy.forecasts == [forecast] and policy.ticks == [42.0, 50.0]
    assert manager.num_used_hot_blocks == 1 and manager.num_used_host_blocks == 2
    assert manager.block(Tier.HOT, held[0]).ref_count == 1
