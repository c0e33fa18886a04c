"""The prefix index against a real block manager's events (replay = its matchable set)."""
from __future__ import annotations

import random

from cache.block_manager import BlockManager
from cache.events import AllCleared, BlockRemoved, BlockStored
from cache.hashing import BlockHash
from cache.tiers import Tier
from shards.prefix_index import PrefixIndex

BLOCK = 4


def _matchable(manager: BlockManager) -> dict[Tier, set[int]]:
    return {tier: {b.hash for b in manager.blocks(tier) if b.is_cached} for tier in Tier}


def _held(index: PrefixIndex, worker: str, hashes) -> dict[Tier, set[int]]:
    held = {tier: set() for tier in Tier}
    for block_hash in hashes:
        tier = index.workers_holding(block_hash).get(worker)
        if tier is not None:
            held[tier].add(block_hash)
    return held


def test_prefix_index_replaying_events_equals_block_manager_contents():
    rng = random.Random(1)
    manager = BlockManager(num_hot_blocks=6, num_host_blocks=4, block_size=BLOCK)
    index = PrefixIndex()
    seen: set[int] = set()
    for step in range(40):
        tokens = [rng.randrange(5) for _ in range(BLOCK * rng.randint(1, 4))]
        hashes, blocks = manager.hash_prompt("t", tokens)
        seen.update(hashes)
        match = manager.match("t", hashes, blocks)
        held = manager.acquire("t", None, match, len(tokens))
        placed = manager.commit("t", None, hashes, blocks, len(held))
        manager.release(held + [block_id for block_id, _ in placed])
        index.apply("w0", manager.take_events())
        assert _held(index, "w0", seen) == _matchable(manager), step
    assert index.num_blocks("w0") == sum(len(s) for s in _matchable(manager).values())


def test_prefix_index_runs_count_leading_blocks_per_worker():
    index = PrefixIndex()
    h = [BlockHash(i) for i in range(1, 6)]
    index.apply("w0", [BlockStored(tuple(h[:4]), Tier.HOT, "t")])
    index.apply("w1", [BlockStored(tuple(h[:1]), Tier.HOT, "t"), BlockStored(tuple(h[1:3]), Tier.HOST, "t")])
    index.apply("w2", [BlockStored(tuple(h[1:5]), Tier.HOT, "t")])  # no first block: no run
    runs = index.runs(h, ["w0", "w1", "w2", "w3"])
    assert (runs["w0"].num_hot_blocks, runs["w0"].num_host_blocks) == (4, 0)
    assert (runs["w1"].num_hot_blocks, runs["w1"].num_host_blocks) == (1, 2)
    assert runs["w2"].num_blocks == 0 and runs["w3"].num_blocks == 0


def test_prefix_index_purge_forgets_only_that_worker():
    index = PrefixIndex()
    index.apply("w0", [BlockStored((BlockHash(1), BlockHash(2)), Tier.HOT, "t")])
    index.apply("w1", [BlockStored((BlockHash(1),), Tier.HOT, "t")])
    index.purge("w0")
    assert index.workers_holding(BlockHash(1)) == {"w1": Tier.HOT}
    assert index.workers_holding(BlockHash(2)) == {} and index.num_blocks("w0") == 0


def test_prefix_index_replace_reconciles_to_the_snapshot():
    index = PrefixIndex()
    index.apply("w0", [BlockStored((BlockHash(1), BlockHash(2)), Tier.HOT, "t")])
    index.replace("w0", [BlockHash(3)], [BlockHash(4)])
    assert index.workers_holding(BlockHash(1)) == {}
    assert index.workers_holding(BlockHash(3)) == {"w0": Tier.HOT}
    assert index.workers_holding(BlockHash(4)) == {"w0": Tier.HOST}


def test_prefix_index_all_cleared_and_stale_removals():
    index = PrefixIndex()
    index.apply("w0", [BlockStored((BlockHash(1),), Tier.HOST, "t"),
                       BlockRemoved((BlockHash(1),), Tier.HOT)])  # wrong tier: stale, ignored
    assert index.workers_holding(BlockHash(1)) == {"w0": Tier.HOST}
    index.apply("w0", [AllCleared()])
    assert index.num_blocks("w0") == 0
