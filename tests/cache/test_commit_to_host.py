"""A commit that finds HOT full of blocks in use writes its new blocks through to HOST
(`BlockMoves.commit_to_host`), as a demotion would place them."""
from __future__ import annotations

import pytest

from cache.block_manager import BlockManager
from cache.events import BlockStored
from cache.lru import LRUPolicy
from cache.policies import make_policy
from cache.tiers import Tier


def _manager(num_hot_blocks: int = 2, num_host_blocks: int = 4, policy=None) -> BlockManager:
    return BlockManager(num_hot_blocks=num_hot_blocks, num_host_blocks=num_host_blocks, block_size=2,
                        policy=policy)


def _hold_all_hot(manager: BlockManager, tenant: str = "t") -> list[int]:
    """A running request holding every HOT slot (its committed prompt)."""
    tokens = list(range(100, 100 + 2 * manager.num_free_hot_blocks))
    hashes, blocks = manager.hash_prompt(tenant, tokens)
    held = [block_id for block_id, _ in manager.commit(tenant, "holder", hashes, blocks, 0)]
    assert manager.num_free_hot_blocks == 0
    return held


def _short_commit(manager: BlockManager, tokens: list[int], session: str = "s") -> tuple[list, list]:
    """What the runner does: `commit`, then the rest to HOST when it came back short."""
    hashes, blocks = manager.hash_prompt("t", tokens)
    placed = manager.commit("t", session, hashes, blocks, 0)
    return placed, manager.commit_to_host("t", session, hashes, blocks, len(placed))


def test_short_commit_goes_to_host_and_a_later_request_hits_it() -> None:
    manager = _manager(num_hot_blocks=3)
    held = _hold_all_hot(manager)
    manager.take_events()
    tokens = [1, 2, 3, 4, 5, 6]
    placed, spilled = _short_commit(manager, tokens)
    assert placed == []                       # HOT is full of blocks in use
    assert [position for position, _ in spilled] == [0, 1, 2]
    assert [event for event in manager.take_events() if isinstance(event, BlockStored)] == [
        BlockStored(tuple(manager.hash_prompt("t", tokens)[0]), Tier.HOST, "t", None)]
    assert all(manager.block(Tier.HOST, host_id).ref_count == 0 for _, host_id in spilled)
    assert manager.stats().num_host_commits == 3   # counted for the workers' stats (/metrics)

    hashes, blocks = manager.hash_prompt("t", tokens)
    match = manager.match("t", hashes, blocks)
    assert match.host_block_ids == [host_id for _, host_id in spilled]   # a host hit, not a miss
    manager.release(held)
    assert len(manager.acquire("t", "s2", match, len(tokens))) == 3     # promoted back to HOT on use
    assert manager.stats().tenants["t"].num_host_hit_tokens == 6


def test_no_host_tier_changes_nothing() -> None:
    manager = _manager(num_host_blocks=0)
    _hold_all_hot(manager)
    manager.take_events()
    placed, spilled = _short_commit(manager, [1, 2, 3, 4])
    assert placed == [] and spilled == []
    assert manager.take_events() == []
    hashes, blocks = manager.hash_prompt("t", [1, 2, 3, 4])
    assert manager.match("t", hashes, blocks).num_blocks == 0


def test_commit_to_host_continues_after_the_hot_part_and_passes_over_cached_blocks() -> None:
    manager = _manager(num_hot_blocks=2, num_host_blocks=4)
    hashes, blocks = manager.hash_prompt("t", [1, 2, 3, 4, 5, 6, 7, 8])
    [(head, _)] = manager.commit("t", "s", hashes[:1], blocks[:1], 0)   # the request holds its head in HOT
    manager.commit("t", "x", *manager.hash_prompt("t", [9, 9]), 0)       # another request fills HOT
    assert manager.commit("t", "s", hashes[:3], blocks[:3], 1) == []
    first = manager.commit_to_host("t", "s", hashes[:3], blocks[:3], 1)  # the prompt's commit
    assert [position for position, _ in first] == [1, 2]
    assert manager.commit("t", "s", hashes, blocks, 1) == []             # HOT still full: no promotion
    second = manager.commit_to_host("t", "s", hashes, blocks, 1)         # the finish-time commit
    assert [position for position, _ in second] == [3]                   # 1 and 2 are there already
    match = manager.match("t", hashes, blocks)
    assert match.hot_block_ids == [head] and len(match.host_block_ids) == 3


def test_full_host_evicts_by_the_policy_but_never_the_new_blocks_parent() -> None:
    manager = _manager(num_hot_blocks=2, num_host_blocks=2)
    held = _hold_all_hot(manager)
    _, old = _short_commit(manager, [50, 51, 52, 53], session="old")   # fills HOST, unreferenced
    assert len(old) == 2
    _, spilled = _short_commit(manager, [1, 2, 3, 4, 5, 6])
    # LRU evicts the two old blocks for blocks 0 and 1; for block 2 only those two are left, and room
    # never comes from a block of the same commit
    assert [position for position, _ in spilled] == [0, 1]
    hashes, blocks = manager.hash_prompt("t", [1, 2, 3, 4, 5, 6])
    assert len(manager.match("t", hashes, blocks).host_block_ids) == 2
    assert manager.stats().tiers[Tier.HOST].num_evictions == 2
    manager.release(held)


def test_background_blocks_go_to_host_only_into_free_slots() -> None:
    manager = _manager(num_hot_blocks=2, num_host_blocks=1)
    _hold_all_hot(manager)
    _short_commit(manager, [50, 51], session="old")   # HOST's one slot, evictable
    hashes, blocks = manager.hash_prompt("t", [1, 2])
    assert manager.commit_to_host("t", None, hashes, blocks, 0, background=True) == []   # no should_demote
    assert len(manager.commit_to_host("t", None, hashes, blocks, 0)) == 1


def test_unregistered_prefix_places_nothing() -> None:
    manager = _manager()
    _hold_all_hot(manager)
    hashes, blocks = manager.hash_prompt("t", [1, 2, 3, 4])
    assert manager.commit_to_host("t", None, hashes, blocks, 1) == []   # block 0 was never committed
    assert manager.stats().tiers[Tier.HOST].used_bytes == 0


class _Recording(LRUPolicy):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, Tier]] = []

    def on_insert(self, block, now_s):
        self.calls.append(("insert", block.tier))
        super().on_insert(block, now_s)

    def should_demote(self, block, now_s):
        self.calls.append(("should_demote", block.tier))
        return True


def test_policy_sees_a_written_through_block_as_a_demoted_one() -> None:
    policy = _Recording()
    manager = _manager(num_hot_blocks=2, num_host_blocks=1, policy=policy)
    _hold_all_hot(manager)
    _short_commit(manager, [50, 51], session="old")
    policy.calls.clear()
    _short_commit(manager, [1, 2])
    assert policy.calls == [("should_demote", Tier.HOST), ("insert", Tier.HOST)]   # HOST full: asked, then told
    assert policy.num_evictable(Tier.HOST) == 1


@pytest.mark.parametrize("name", ["lru", "predictive", "ttl", "kvflow"])
def test_every_policy_takes_written_through_blocks(name: str) -> None:
    manager = _manager(num_hot_blocks=2, num_host_blocks=3, policy=make_policy(name))
    held = _hold_all_hot(manager)
    for i in range(3):   # more than HOST holds: later ones push earlier ones out through the policy
        _short_commit(manager, [10 * i + 1, 10 * i + 2, 10 * i + 3, 10 * i + 4], session=f"s{i}")
    assert manager.stats().tiers[Tier.HOST].used_bytes == 3
    manager.release(held)
    hashes, blocks = manager.hash_prompt("t", [21, 22, 23, 24])
    match = manager.match("t", hashes, blocks)
    assert len(manager.acquire("t", "s2", match, 4)) == len(match.host_block_ids) > 0
