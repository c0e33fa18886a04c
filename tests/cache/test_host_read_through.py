"""`BlockManager.acquire_run`: the HOST part of a match that HOT has no room to promote
stays in HOST, referenced, for the caller to read straight into its own cache; it counts
as host hits, nothing can take its slots until `release_host`, and a commit past it
links its new blocks to it."""
from __future__ import annotations

import pytest

from cache.block_manager import BlockManager
from cache.tiers import Tier

BLOCK = 2
PROMPT = [1, 2, 3, 4, 5, 6]   # 3 full blocks


def _manager(num_hot_blocks: int = 3, num_host_blocks: int = 6) -> BlockManager:
    return BlockManager(num_hot_blocks=num_hot_blocks, num_host_blocks=num_host_blocks, block_size=BLOCK)


def _cached(manager: BlockManager, tokens: list[int], session: str) -> list[int]:
    """Commit `tokens` and hold them (a running request): their HOT ids."""
    hashes, blocks = manager.hash_prompt("t", tokens)
    return [block_id for block_id, _ in manager.commit("t", session, hashes, blocks, 0)]


def _prompt_in_host_beside_a_full_hot_tier(manager: BlockManager, num_holder_blocks: int) -> list[int]:
    """PROMPT's 3 blocks demoted to HOST, and a running request holding
    `num_holder_blocks` HOT blocks (its ids returned)."""
    manager.release(_cached(manager, PROMPT, "first"))
    held = _cached(manager, list(range(100, 100 + BLOCK * num_holder_blocks)), "holder")
    assert len(held) == num_holder_blocks
    assert manager.match("t", *manager.hash_prompt("t", PROMPT)).host_block_ids
    return held


def _check_slots(manager: BlockManager) -> None:
    stats = manager.stats()
    for tier in Tier:
        counts = stats.tiers[tier]
        assert counts.num_free_blocks + counts.num_used_blocks == counts.num_blocks


def test_a_host_match_with_no_hot_room_is_read_through_as_host_hits() -> None:
    manager = _manager()
    held = _prompt_in_host_beside_a_full_hot_tier(manager, 3)
    hashes, blocks = manager.hash_prompt("t", PROMPT)
    match = manager.match("t", hashes, blocks)
    assert (len(match.hot_block_ids), len(match.host_block_ids)) == (0, 3)
    acquired = manager.acquire_run("t", "s", match, len(PROMPT) + 1)
    assert acquired.hot_ids == [] and acquired.host_ids == match.host_block_ids and acquired.num_blocks == 3
    assert [manager.block(Tier.HOST, host_id).ref_count for host_id in acquired.host_ids] == [1, 1, 1]
    tenant = manager.stats().tenants["t"]
    assert (tenant.num_hot_hit_tokens, tenant.num_host_hit_tokens, tenant.num_miss_tokens) == (0, 3 * BLOCK, 1)
    assert manager.stats().num_referenced_blocks == 3 + 3   # the holder's and the read ones
    manager.release_host(acquired.host_ids)
    manager.release(held)
    assert manager.stats().num_referenced_blocks == 0
    assert all(manager.block(Tier.HOST, host_id).is_cached for host_id in acquired.host_ids)   # still cached
    _check_slots(manager)


def test_acquire_still_lets_the_unpromoted_rest_go() -> None:
    manager = _manager()
    _prompt_in_host_beside_a_full_hot_tier(manager, 3)
    hashes, blocks = manager.hash_prompt("t", PROMPT)
    assert manager.acquire("t", "s", manager.match("t", hashes, blocks), len(PROMPT)) == []
    assert manager.stats().num_referenced_blocks == 3   # the holder's alone
    assert manager.stats().tenants["t"].num_host_hit_tokens == 0


def test_promotion_goes_as_far_as_hot_has_room_and_the_rest_is_read() -> None:
    manager = _manager()
    held = _prompt_in_host_beside_a_full_hot_tier(manager, 3)
    manager.release(held[-1:])   # the holder's last block may now be evicted: room for one promotion
    hashes, blocks = manager.hash_prompt("t", PROMPT)
    match = manager.match("t", hashes, blocks)
    assert len(match.host_block_ids) == 3
    acquired = manager.acquire_run("t", "s", match, len(PROMPT))
    assert len(acquired.hot_ids) == 1 and acquired.host_ids == match.host_block_ids[1:]
    assert manager.block(Tier.HOT, acquired.hot_ids[0]).position == 0
    assert [manager.block(Tier.HOST, host_id).position for host_id in acquired.host_ids] == [1, 2]
    assert manager.stats().tenants["t"].num_host_hit_tokens == 3 * BLOCK


def test_read_blocks_keep_their_slots_until_released() -> None:
    manager = _manager(num_hot_blocks=3, num_host_blocks=3)   # HOST holds the prompt and nothing more
    held = _prompt_in_host_beside_a_full_hot_tier(manager, 3)
    hashes, blocks = manager.hash_prompt("t", PROMPT)
    acquired = manager.acquire_run("t", "s", manager.match("t", hashes, blocks), len(PROMPT))
    with pytest.raises(ValueError, match="in use"):
        manager.drop(acquired.host_ids[0], Tier.HOST)
    other_hashes, other_blocks = manager.hash_prompt("t", [7, 8, 9, 10])
    assert manager.commit_to_host("t", "o", other_hashes, other_blocks, 0) == []   # no HOST victim to be had
    assert manager.num_free_host_blocks == 0
    manager.release_host(acquired.host_ids)
    with pytest.raises(ValueError, match="host block"):
        manager.release_host(acquired.host_ids[:1])   # no reference left on it
    manager.release(held)
    _check_slots(manager)


def test_a_commit_past_the_read_blocks_links_to_them() -> None:
    manager = _manager(num_hot_blocks=3, num_host_blocks=8)
    held = _prompt_in_host_beside_a_full_hot_tier(manager, 3)
    tokens = PROMPT + [11, 12, 13, 14]   # the prompt, then 2 new blocks
    hashes, blocks = manager.hash_prompt("t", tokens)
    acquired = manager.acquire_run("t", "s", manager.match("t", hashes, blocks), len(tokens))
    last_read = manager.block(Tier.HOST, acquired.host_ids[-1])
    manager.release_host(acquired.host_ids)
    placed = manager.commit("t", "s", hashes, blocks, acquired.num_blocks)
    assert placed == []                        # HOT is still full of the holder's blocks
    spilled = manager.commit_to_host("t", "s", hashes, blocks, acquired.num_blocks)
    assert [position for position, _ in spilled] == [3, 4]   # the read blocks are not written again
    assert manager.block(Tier.HOST, spilled[0][1]).parent_uid == last_read.uid
    assert manager.stats().num_host_commits == 2
    manager.release(held)
    match = manager.match("t", hashes, blocks)
    assert len(match.host_block_ids) == 5      # the whole prompt matches, through the read blocks
    manager.release(manager.acquire("t", "s2", match, len(tokens)))
    assert manager.stats().num_referenced_blocks == 0
    _check_slots(manager)


def test_clear_while_reading_frees_the_read_blocks_at_their_release() -> None:
    manager = _manager()
    held = _prompt_in_host_beside_a_full_hot_tier(manager, 3)
    hashes, blocks = manager.hash_prompt("t", PROMPT)
    acquired = manager.acquire_run("t", "s", manager.match("t", hashes, blocks), len(PROMPT))
    manager.clear()
    assert manager.num_used_host_blocks == 3   # private now, still the reader's
    manager.release_host(acquired.host_ids)
    manager.release(held)
    assert manager.num_used_host_blocks == 0 and manager.num_used_hot_blocks == 0
    assert manager.stats().num_referenced_blocks == 0
    _check_slots(manager)
