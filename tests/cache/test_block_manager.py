"""BlockManager: the request path, isolation, collisions, stats, and random-op invariants."""
from __future__ import annotations

import random
from collections import Counter

import pytest

from cache.block_manager import BlockManager, Match
from cache.events import BlockRemoved, BlockStored, CacheEvent
from cache.hashing import BlockHash
from cache.lru import LRUPolicy
from cache.tiers import Tier


class ShadowArena:
    """A BlockMover over a dict: each slot holds the (salt, prefix) its KV was computed for.

    The test writes a slot when `commit` says `is_new`; the manager moves slots through
    `copy_block`. Reading a slot back after `acquire` tells whether the manager ever hands
    out KV computed for another prefix.
    """

    def __init__(self) -> None:
        self.slots: dict[tuple[Tier, int], tuple[bytes, tuple[int, ...]]] = {}

    def copy_block(self, src_tier: Tier, src_id: int, dst_tier: Tier, dst_id: int) -> None:
        self.slots[(dst_tier, dst_id)] = self.slots[(src_tier, src_id)]


def _serve(manager: BlockManager, arena: ShadowArena | None, tenant: str, tokens: list[int],
           background: bool = False) -> list[int]:
    """match -> acquire -> commit (for a flex request when `background`), checking every
    reused slot's KV; returns held HOT ids."""
    size = manager.block_size
    salt = manager.salt_for(tenant)
    hashes, blocks = manager.hash_prompt(tenant, tokens)
    held = manager.acquire(tenant, f"{tenant}-session", manager.match(tenant, hashes, blocks), len(tokens),
                           background=background)
    committed = manager.commit(tenant, f"{tenant}-session", hashes, blocks, len(held), background=background)
    if arena is not None:
        for position, block_id in enumerate(held):
            assert arena.slots[(Tier.HOT, block_id)] == (salt, tuple(tokens[: (position + 1) * size]))
        for position, (block_id, is_new) in enumerate(committed, start=len(held)):
            prefix = (salt, tuple(tokens[: (position + 1) * size]))
            if is_new:
                arena.slots[(Tier.HOT, block_id)] = prefix
            else:
                assert arena.slots[(Tier.HOT, block_id)] == prefix
    return held + [block_id for block_id, _ in committed]


def _replay(events: list[CacheEvent], index: set[tuple[int, Tier]]) -> None:
    for event in events:
        if isinstance(event, BlockStored):
            index.update((block_hash, event.tier) for block_hash in event.hashes)
        elif isinstance(event, BlockRemoved):
            index.difference_update((block_hash, event.tier) for block_hash in event.hashes)
        else:
            index.clear()


def _check_invariants(manager: BlockManager, held: list[list[int]], index: set[tuple[int, Tier]]) -> None:
    refs = Counter(block_id for ids in held for block_id in ids)
    cached = set()
    for tier, total in ((Tier.HOT, manager.num_hot_blocks), (Tier.HOST, manager.num_host_blocks)):
        blocks = manager.blocks(tier)
        assert manager.num_free_blocks(tier) + len(blocks) == total
        for block in blocks:
            assert (block.tier, manager.block(tier, block.id)) == (tier, block)
            assert block.ref_count == (refs[block.id] if tier is Tier.HOT else 0)
            if block.is_cached:
                assert manager.find(block.hash) is block
                cached.add((block.hash, tier))
    assert manager.num_free_hot_blocks + manager.num_used_hot_blocks == manager.num_hot_blocks
    assert set(refs) <= {block.id for block in manager.blocks(Tier.HOT)}
    _replay(manager.take_events(), index)
    assert index == cached
    stats = manager.stats()
    for tenant in stats.tenants.values():
        num_hit_tokens = tenant.num_hot_hit_tokens + tenant.num_host_hit_tokens
        assert tenant.num_query_tokens == num_hit_tokens + tenant.num_miss_tokens
    overall = stats.overall()
    assert overall.num_hot_blocks == stats.tiers[Tier.HOT].num_used_blocks
    assert overall.num_host_blocks == stats.tiers[Tier.HOST].num_used_blocks
    assert stats.num_referenced_blocks == len(refs)
    background = manager._residency.background
    for tier in Tier:   # the background index holds exactly the evictable background blocks
        evictable = [b for b in manager.blocks(tier) if b.is_background and b.is_cached and b.ref_count == 0]
        indexed = background.oldest(tier, len(evictable) + 1)
        assert len(indexed) == len(evictable) and set(indexed) == set(evictable)


def test_block_manager_invariants_under_random_operations() -> None:
    rng = random.Random(99)
    arena = ShadowArena()
    manager = BlockManager(
        num_hot_blocks=12, num_host_blocks=6, block_size=2, mover=arena, prefix_groups={"a": "g", "b": "g"}
    )
    conversations = [[rng.randrange(3) for _ in range(16)] for _ in range(6)]
    held: list[list[int]] = []
    index: set[tuple[int, Tier]] = set()
    for _ in range(3000):
        op = rng.random()
        if len(held) > 3:
            manager.release(held.pop(rng.randrange(len(held))))
        elif op < 0.45 or not held:
            tokens = rng.choice(conversations)[: rng.randrange(1, 17)]
            held.append(_serve(manager, arena, rng.choice("abc"), tokens, background=rng.random() < 0.3))
        elif op < 0.75:
            manager.release(held.pop(rng.randrange(len(held))))
        elif op < 0.85:
            candidates = [b.id for b in manager.blocks(Tier.HOT) if manager.can_demote(b.id)]
            if candidates:
                manager.demote(rng.choice(candidates))
        elif op < 0.92:
            candidates = [b.id for b in manager.blocks(Tier.HOST)]
            if candidates:
                manager.promote(rng.choice(candidates))
        elif op < 0.995:
            tier = rng.choice(list(Tier))
            candidates = [b.id for b in manager.blocks(tier) if b.is_cached and b.ref_count == 0]
            if candidates:
                manager.drop(rng.choice(candidates), tier)
        else:
            manager.clear()
        _check_invariants(manager, held, index)
    stats = manager.stats()
    assert stats.num_demotions > 50 and stats.num_promotions > 50 and stats.num_drops > 50
    assert stats.overall().num_host_hit_tokens > 0
    assert 0 < stats.tiers[Tier.HOT].num_background_evictions < stats.tiers[Tier.HOT].num_evictions


def test_block_manager_referenced_block_is_never_evicted() -> None:
    manager = BlockManager(num_hot_blocks=4, block_size=2)
    held = _serve(manager, None, "t", list(range(8)))
    before = [manager.block(Tier.HOT, block_id) for block_id in held]
    hashes, blocks = manager.hash_prompt("t", [9] * 8)
    assert manager.commit("t", None, hashes, blocks, 0) == []
    assert [manager.block(Tier.HOT, block_id) for block_id in held] == before
    assert manager.num_free_hot_blocks == 0
    manager.release(held[2:])
    assert [block_id for block_id, _ in manager.commit("t", None, hashes, blocks, 0)] == [held[3], held[2]]


def test_block_manager_commit_stops_early_when_full() -> None:
    manager = BlockManager(num_hot_blocks=3, block_size=2)
    hashes, blocks = manager.hash_prompt("t", list(range(10)))
    result = manager.commit("t", None, hashes, blocks, 0)
    assert result == [(0, True), (1, True), (2, True)]
    assert manager.match("t", hashes, blocks).hot_block_ids == [0, 1, 2]


def test_block_manager_tenants_do_not_share_blocks() -> None:
    manager = BlockManager(num_hot_blocks=8, block_size=2)
    tokens = list(range(6))
    manager.release(_serve(manager, None, "a", tokens))
    hashes_b, blocks_b = manager.hash_prompt("b", tokens)
    assert manager.match("b", hashes_b, blocks_b).num_blocks == 0
    hashes_a, _ = manager.hash_prompt("a", tokens)
    assert manager.match("b", hashes_a, blocks_b).num_blocks == 0  # a's hashes, b's scope: still no hit
    assert manager.match("a", hashes_a, blocks_b).num_hot_tokens == 6


def test_block_manager_prefix_group_shares_blocks() -> None:
    manager = BlockManager(num_hot_blocks=8, block_size=2, prefix_groups={"a": "g", "b": "g"})
    tokens = list(range(6))
    manager.release(_serve(manager, None, "a", tokens))
    hashes, blocks = manager.hash_prompt("b", tokens)
    assert manager.match("b", hashes, blocks).num_hot_tokens == 6
    hashes_c, blocks_c = manager.hash_prompt("c", tokens)
    assert manager.match("c", hashes_c, blocks_c).num_blocks == 0


def test_block_manager_prefix_group_given_as_function() -> None:
    groups = {"a": "g", "b": "g"}
    manager = BlockManager(num_hot_blocks=8, block_size=2, prefix_groups=groups.get)
    manager.release(_serve(manager, None, "a", [1, 2, 3, 4]))
    hashes, blocks = manager.hash_prompt("b", [1, 2, 3, 4])
    assert manager.salt_for("b") == manager.salt_for("a") != manager.salt_for("c")
    assert manager.match("b", hashes, blocks).num_hot_tokens == 4


def test_block_manager_forced_collision_never_returns_wrong_block() -> None:
    manager = BlockManager(num_hot_blocks=8, block_size=2)
    h0, h1 = BlockHash(111), BlockHash(222)
    manager.release([block_id for block_id, _ in manager.commit("t", None, [h0, h1], [(1, 1), (5, 5)], 0)])
    # Same hashes, different first block: a collision at h0, equal tokens at h1.
    assert manager.match("t", [h0, h1], [(2, 2), (5, 5)]).num_blocks == 0
    # Drop the head; the colliding prompt takes h0 over, and a1 must not be reused under it.
    manager.drop(manager.find(h0).id, Tier.HOT)
    old_child = manager.find(h1)
    result = manager.commit("t", None, [h0, h1], [(2, 2), (5, 5)], 0)
    assert [is_new for _, is_new in result] == [True, True]
    assert manager.find(h1) is not old_child
    assert manager.match("t", [h0, h1], [(1, 1), (5, 5)]).num_blocks == 0
    assert manager.match("t", [h0, h1], [(2, 2), (5, 5)]).hot_block_ids == [block_id for block_id, _ in result]


def test_block_manager_collision_with_block_in_use_stays_private() -> None:
    manager = BlockManager(num_hot_blocks=8, block_size=2)
    h0 = BlockHash(7)
    [(first, _)] = manager.commit("t", None, [h0], [(1, 1)], 0)
    [(second, is_new)] = manager.commit("t", None, [h0], [(2, 2)], 0)
    assert is_new and second != first
    assert manager.stats().num_collisions == 1
    assert manager.match("t", [h0], [(1, 1)]).hot_block_ids == [first]
    assert manager.match("t", [h0], [(2, 2)]).num_blocks == 0
    manager.release([second])
    assert manager.block(Tier.HOT, second) is None  # private: freed at its last release


def test_block_manager_match_is_read_only() -> None:
    manager = BlockManager(num_hot_blocks=4, block_size=2)
    manager.release(_serve(manager, None, "t", [1, 2, 3, 4]))
    manager.take_events()
    hashes, blocks = manager.hash_prompt("t", [1, 2, 3, 4])
    stats = manager.stats()
    match = manager.match("t", hashes, blocks)
    assert match == Match([0, 1], [], 4, 0, match.block_uids)
    assert [manager.block(Tier.HOT, i).ref_count for i in (0, 1)] == [0, 0]
    assert manager.stats() == stats
    assert manager.take_events() == []


def test_block_manager_acquire_stops_at_slot_reused_since_match() -> None:
    manager = BlockManager(num_hot_blocks=2, block_size=2)
    manager.release(_serve(manager, None, "t", [1, 2, 3, 4]))
    hashes, blocks = manager.hash_prompt("t", [1, 2, 3, 4])
    match = manager.match("t", hashes, blocks)
    manager.release(_serve(manager, None, "t", [9, 9]))  # evicts the tail, reuses its slot
    assert manager.acquire("t", None, match, 4) == match.hot_block_ids[:1]


def test_block_manager_commit_continues_after_start() -> None:
    manager = BlockManager(num_hot_blocks=8, block_size=2)
    hashes, blocks = manager.hash_prompt("t", list(range(8)))
    first = manager.commit("t", None, hashes[:2], blocks[:2], 0)
    rest = manager.commit("t", None, hashes, blocks[2:], 2)
    assert [is_new for _, is_new in rest] == [True, True]
    ids = [block_id for block_id, _ in first + rest]
    assert manager.match("t", hashes, blocks).hot_block_ids == ids
    assert manager.commit("t", None, hashes, blocks, 4) == []
    with pytest.raises(ValueError):
        manager.commit("t", None, hashes, blocks[:3], 0)


def test_block_manager_commit_after_unregistered_prefix_stays_private() -> None:
    manager = BlockManager(num_hot_blocks=8, block_size=2)
    hashes, blocks = manager.hash_prompt("t", list(range(6)))
    [(head, _)] = manager.commit("t", None, hashes[:1], blocks[:1], 0)
    manager.clear()  # the held head becomes private
    rest = manager.commit("t", None, hashes, blocks, 1)
    assert len(rest) == 2 and manager.match("t", hashes, blocks).num_blocks == 0
    manager.release([head] + [block_id for block_id, _ in rest])
    assert manager.num_used_hot_blocks == 0


def test_block_manager_release_rejects_unheld_block() -> None:
    manager = BlockManager(num_hot_blocks=4, block_size=2)
    held = _serve(manager, None, "t", [1, 2])
    manager.release(held)
    with pytest.raises(ValueError):
        manager.release(held)
    with pytest.raises(ValueError):
        manager.release([3])


def test_block_manager_stats_per_tenant() -> None:
    manager = BlockManager(num_hot_blocks=8, num_host_blocks=4, block_size=4, bytes_per_block=10)
    manager.release(_serve(manager, None, "a", list(range(10))))  # 2 full blocks, all miss
    manager.release(_serve(manager, None, "a", list(range(10))))  # 8 of 10 tokens hit
    manager.release(_serve(manager, None, "b", list(range(4))))
    stats = manager.stats()
    a, b = stats.tenants["a"], stats.tenants["b"]
    assert (a.num_requests, a.num_query_tokens, a.num_hot_hit_tokens, a.num_miss_tokens) == (2, 20, 8, 12)
    assert (a.num_hot_blocks, a.num_host_blocks) == (2, 0)
    assert (b.num_requests, b.num_query_tokens, b.num_hot_hit_tokens, b.num_miss_tokens) == (1, 4, 0, 4)
    assert stats.tiers[Tier.HOT].used_bytes == 30
    assert stats.overall().hit_ratio == 8 / 24


def test_block_manager_policy_must_not_offer_referenced_victim() -> None:
    class BrokenPolicy(LRUPolicy):
        def choose_victim(self, tier: Tier, now_s: float, tenant: str | None = None) -> int | None:
            return 0

    manager = BlockManager(num_hot_blocks=1, block_size=2, policy=BrokenPolicy())
    _serve(manager, None, "t", [1, 2])
    hashes, blocks = manager.hash_prompt("t", [3, 4])
    with pytest.raises(RuntimeError):
        manager.commit("t", None, hashes, blocks, 0)


def test_block_manager_rejects_bad_sizes() -> None:
    with pytest.raises(ValueError):
        BlockManager(num_hot_blocks=0)
    with pytest.raises(ValueError):
        BlockManager(num_hot_blocks=1, block_size=0)
    with pytest.raises(ValueError):
        BlockManager(num_hot_blocks=1, num_host_blocks=-1)


def test_block_manager_sessions_are_bounded_most_recent() -> None:
    manager = BlockManager(num_hot_blocks=4, block_size=2, max_sessions_per_block=2)
    hashes, blocks = manager.hash_prompt("t", [1, 2])
    for session in ("s1", "s2", "s3", "s2"):
        held = manager.acquire("t", session, manager.match("t", hashes, blocks), 2)
        held += [block_id for block_id, _ in manager.commit("t", session, hashes, blocks, len(held))]
        manager.release(held)
    assert list(manager.find(hashes[0]).sessions) == ["s3", "s2"]
