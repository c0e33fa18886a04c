"""LRUPolicy: unit behaviour, and the block manager under LRU against a reference model."""
from __future__ import annotations

import random

from cache.block_manager import BlockManager
from cache.block_meta import BlockMeta, LineageId
from cache.events import BlockRemoved
from cache.hashing import BlockHash
from cache.lru import LRUPolicy
from cache.tiers import Tier


def _block(block_id: int, tier: Tier = Tier.HOT, ref_count: int = 0) -> BlockMeta:
    return BlockMeta(
        id=block_id,
        tier=tier,
        uid=LineageId(block_id),
        hash=BlockHash(block_id),
        tokens=(),
        tenant="t",
        salt=b"",
        parent_hash=None,
        parent_uid=None,
        position=0,
        ref_count=ref_count,
    )


def _serve(manager: BlockManager, tenant: str, tokens: list[int]) -> list[int]:
    """One request: match, acquire, commit the rest; returns the held HOT ids."""
    hashes, blocks = manager.hash_prompt(tenant, tokens)
    held = manager.acquire(tenant, None, manager.match(tenant, hashes, blocks), len(tokens))
    held += [block_id for block_id, _ in manager.commit(tenant, None, hashes, blocks, len(held))]
    return held


def test_lru_victim_is_least_recently_released() -> None:
    policy = LRUPolicy()
    blocks = [_block(i, ref_count=1) for i in range(3)]
    for block in blocks:
        policy.on_insert(block, 0.0)
    assert policy.choose_victim(Tier.HOT, 0.0) is None
    for block in (blocks[2], blocks[0], blocks[1]):
        block.ref_count = 0
        policy.on_release(block, 1.0)
    assert policy.choose_victim(Tier.HOT, 1.0) == 2
    blocks[2].ref_count = 1
    policy.on_access(blocks[2], None, 2.0)
    assert policy.choose_victim(Tier.HOT, 2.0) == 0
    policy.on_remove(blocks[0])
    assert policy.choose_victim(Tier.HOT, 2.0) == 1
    assert policy.num_evictable(Tier.HOT) == 1


def test_lru_inserted_unreferenced_block_is_evictable_per_tier() -> None:
    policy = LRUPolicy()
    policy.on_insert(_block(5, Tier.HOST), 0.0)
    assert policy.choose_victim(Tier.HOST, 0.0) == 5
    assert policy.choose_victim(Tier.HOT, 0.0) is None


def test_lru_evicts_tail_before_head() -> None:
    manager = BlockManager(num_hot_blocks=4, block_size=2)
    hashes, _ = manager.hash_prompt("t", list(range(8)))
    manager.release(_serve(manager, "t", list(range(8))))
    manager.take_events()
    evicted = []
    for i in range(4):
        manager.release(_serve(manager, "t", [100 + i, 100 + i]))
        evicted += [event.hashes[0] for event in manager.take_events() if isinstance(event, BlockRemoved)]
    assert evicted[:4] == [hashes[3], hashes[2], hashes[1], hashes[0]]


def test_lru_keeps_head_so_prefix_still_hits_after_tail_eviction() -> None:
    manager = BlockManager(num_hot_blocks=4, block_size=2)
    manager.release(_serve(manager, "t", list(range(8))))
    manager.release(_serve(manager, "t", [100, 100]))
    hashes, blocks = manager.hash_prompt("t", list(range(8)))
    assert manager.match("t", hashes, blocks).num_hot_tokens == 6


class ReferenceLRU:
    """The obvious list-based LRU over whole-prefix keys (no lineage, no tiers)."""

    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        self.refs: dict[int, int] = {}
        self.order: list[int] = []  # evictable keys, least recently released first
        self.evicted: list[int] = []

    def _ref(self, key: int) -> None:
        if self.refs[key] == 0:
            self.order.remove(key)
        self.refs[key] += 1

    def serve(self, keys: list[int]) -> tuple[int, list[int]]:
        num_hits = 0
        while num_hits < len(keys) and keys[num_hits] in self.refs:
            num_hits += 1
        held: list[int] = []
        for key in keys:
            if key in self.refs:
                self._ref(key)
            elif len(self.refs) < self.num_blocks or self.order:
                if len(self.refs) >= self.num_blocks:
                    victim = self.order.pop(0)
                    del self.refs[victim]
                    self.evicted.append(victim)
                self.refs[key] = 1
            else:
                break
            held.append(key)
        return num_hits, held

    def release(self, held: list[int]) -> None:
        for key in reversed(held):
            self.refs[key] -= 1
            if self.refs[key] == 0:
                self.order.append(key)


def _agent_trace(rng: random.Random, num_requests: int) -> list[tuple[str, list[int]]]:
    """Tenants with a shared system prompt, sessions whose prompts grow step by step."""
    system = {tenant: [rng.randrange(50) for _ in range(8)] for tenant in ("a", "b")}
    sessions: dict[str, tuple[str, list[int]]] = {}
    trace = []
    for _ in range(num_requests):
        if not sessions or rng.random() < 0.25:
            tenant = rng.choice(("a", "b"))
            name = f"s{len(sessions)}"
            sessions[name] = (tenant, list(system[tenant]))
        else:
            name = rng.choice(sorted(sessions))
        tenant, prompt = sessions[name]
        prompt += [rng.randrange(50) for _ in range(rng.randrange(1, 10))]
        trace.append((tenant, list(prompt)))
        if len(prompt) > 60:
            del sessions[name]
    return trace


def test_lru_matches_reference_model_on_random_trace() -> None:
    rng = random.Random(1234)
    manager = BlockManager(num_hot_blocks=24, block_size=4)
    reference = ReferenceLRU(24)
    in_flight: list[tuple[list[int], list[int]]] = []
    for tenant, tokens in _agent_trace(rng, 400):
        hashes, blocks = manager.hash_prompt(tenant, tokens)
        match = manager.match(tenant, hashes, blocks)
        held_ids = manager.acquire(tenant, None, match, len(tokens))
        held_ids += [block_id for block_id, _ in manager.commit(tenant, None, hashes, blocks, len(held_ids))]
        num_hits, held_keys = reference.serve(list(hashes))
        assert len(match.hot_block_ids) == num_hits
        assert len(held_ids) == len(held_keys)
        in_flight.append((held_ids, held_keys))
        if len(in_flight) > rng.randrange(1, 4):
            done_ids, done_keys = in_flight.pop(0)
            manager.release(done_ids)
            reference.release(done_keys)
    evicted = [event.hashes[0] for event in manager.take_events() if isinstance(event, BlockRemoved)]
    assert evicted == reference.evicted
    assert len(reference.evicted) > 100
    resident = {block.hash for block in manager.blocks(Tier.HOT)}
    assert resident == set(reference.refs)
