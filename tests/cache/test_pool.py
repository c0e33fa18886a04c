"""TierPool: slot accounting of one tier."""
from __future__ import annotations

import random

import pytest

from cache.block_meta import BlockMeta, LineageId
from cache.hashing import BlockHash
from cache.pool import TierPool
from cache.tiers import Tier


def _block(block_id: int, tier: Tier = Tier.HOT) -> BlockMeta:
    return BlockMeta(
        id=block_id,
        tier=tier,
        uid=LineageId(block_id),
        hash=BlockHash(block_id),
        tokens=(block_id,),
        tenant="t",
        salt=b"",
        parent_hash=None,
        parent_uid=None,
        position=0,
    )


def test_pool_take_hands_out_lowest_ids_first() -> None:
    pool = TierPool(Tier.HOT, 3)
    assert [pool.take(), pool.take(), pool.take()] == [0, 1, 2]
    assert pool.take() is None


def test_pool_put_get_remove_round_trip() -> None:
    pool = TierPool(Tier.HOT, 2)
    block_id = pool.take()
    assert block_id == 0
    block = _block(block_id)
    pool.put(block)
    assert pool.get(0) is block
    assert pool.get(1) is None
    assert pool.get(-1) is None and pool.get(2) is None
    assert (pool.num_used_blocks, pool.num_free_blocks) == (1, 1)
    pool.remove(block)
    assert pool.get(0) is None
    assert (pool.num_used_blocks, pool.num_free_blocks) == (0, 2)
    assert pool.take() == 0


def test_pool_rejects_foreign_block() -> None:
    pool = TierPool(Tier.HOT, 2)
    with pytest.raises(ValueError):
        pool.remove(_block(0))
    with pytest.raises(ValueError):
        pool.put(_block(0, Tier.HOST))


def test_pool_free_plus_used_is_total_under_random_churn() -> None:
    rng = random.Random(7)
    pool = TierPool(Tier.HOST, 16)
    held: list[BlockMeta] = []
    for _ in range(2000):
        if held and (rng.random() < 0.5 or pool.num_free_blocks == 0):
            pool.remove(held.pop(rng.randrange(len(held))))
        else:
            block_id = pool.take()
            assert block_id is not None
            block = _block(block_id, Tier.HOST)
            pool.put(block)
            held.append(block)
        assert pool.num_free_blocks + pool.num_used_blocks == pool.num_blocks
        assert pool.num_used_blocks == len(held) == len(list(pool.blocks()))


def test_pool_zero_capacity_is_allowed() -> None:
    pool = TierPool(Tier.HOST, 0)
    assert pool.take() is None
    assert pool.num_free_blocks == pool.num_used_blocks == 0
    with pytest.raises(ValueError):
        TierPool(Tier.HOST, -1)
