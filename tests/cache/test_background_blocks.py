"""Blocks only flex requests used leave a full tier first, whatever the policy; a default
request's use takes the mark away; without `evict_background_first` the policy decides."""
from __future__ import annotations

from collections import Counter

import pytest

from cache.block_manager import BlockManager
from cache.policies import make_policy
from cache.tiers import Tier

SIZE = 2


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def _manager(policy: str = "lru", hot: int = 4, host: int = 0, **kwargs) -> BlockManager:
    return BlockManager(num_hot_blocks=hot, num_host_blocks=host, block_size=SIZE, policy=make_policy(policy),
                        clock=Clock(), **kwargs)


def _run(manager: BlockManager, tokens: list[int], *, background: bool = False, session: str = "s") -> None:
    """One whole request: match, acquire, commit, release."""
    hashes, blocks = manager.hash_prompt("t", tokens)
    held = manager.acquire("t", session, manager.match("t", hashes, blocks), len(tokens), background=background)
    held += [block_id for block_id, _ in manager.commit("t", session, hashes, blocks, len(held),
                                                        background=background)]
    manager.release(held)


def _cached_tokens(manager: BlockManager, tokens: list[int]) -> int:
    hashes, blocks = manager.hash_prompt("t", tokens)
    match = manager.match("t", hashes, blocks)
    return match.num_hot_tokens + match.num_host_tokens


AGENT = [1, 2, 3, 4]      # two blocks, used first (the LRU victim)
BATCH = [5, 6, 7, 8]      # two blocks, used after
NEWCOMER = [9, 10, 11, 12]


@pytest.mark.parametrize("policy", ["lru", "predictive", "ttl", "kvflow"])
def test_flex_blocks_leave_before_older_default_blocks(policy: str) -> None:
    manager = _manager(policy)
    _run(manager, AGENT)
    _run(manager, BATCH, background=True, session="batch")
    _run(manager, NEWCOMER)
    assert _cached_tokens(manager, AGENT) == 4 and _cached_tokens(manager, BATCH) == 0
    hot = manager.stats().tiers[Tier.HOT]
    assert (hot.num_evictions, hot.num_background_evictions) == (2, 2)


def test_without_the_option_the_policy_decides() -> None:
    manager = _manager(evict_background_first=False)
    _run(manager, AGENT)
    _run(manager, BATCH, background=True)
    _run(manager, NEWCOMER)
    assert _cached_tokens(manager, AGENT) == 0 and _cached_tokens(manager, BATCH) == 4   # LRU order
    assert manager.stats().tiers[Tier.HOT].num_background_evictions == 0


def test_a_default_request_takes_the_mark_away() -> None:
    manager = _manager()
    _run(manager, BATCH, background=True)
    _run(manager, AGENT)
    _run(manager, BATCH)   # an agent's prompt the batch also used: now the agent's too
    assert not any(block.is_background for block in manager.blocks(Tier.HOT))
    _run(manager, NEWCOMER)
    assert _cached_tokens(manager, AGENT) == 0 and _cached_tokens(manager, BATCH) == 4   # LRU order again


def test_a_flex_hit_leaves_a_default_block_default() -> None:
    manager = _manager()
    _run(manager, AGENT)
    _run(manager, AGENT, background=True)
    assert not any(block.is_background for block in manager.blocks(Tier.HOT))


def test_flex_blocks_leave_oldest_release_first() -> None:
    manager = _manager()
    _run(manager, AGENT, background=True)
    _run(manager, BATCH, background=True)
    _run(manager, AGENT, background=True)   # released again: now the newer
    _run(manager, NEWCOMER)
    assert _cached_tokens(manager, AGENT) == 4 and _cached_tokens(manager, BATCH) == 0


def test_flex_blocks_in_use_are_not_evicted() -> None:
    manager = _manager()
    _run(manager, AGENT)
    hashes, blocks = manager.hash_prompt("t", BATCH)
    held = [block_id for block_id, _ in manager.commit("t", "batch", hashes, blocks, 0, background=True)]
    _run(manager, NEWCOMER)   # no room but the agent's: the running batch request keeps its blocks
    assert _cached_tokens(manager, BATCH) == 4 and _cached_tokens(manager, AGENT) == 0
    manager.release(held)


@pytest.mark.parametrize("first", [True, False])
def test_a_flex_victim_is_demoted_only_into_free_host_room(first: bool) -> None:
    manager = _manager(hot=2, host=2, evict_background_first=first)
    _run(manager, AGENT)
    _run(manager, NEWCOMER)   # the agent's blocks move to HOST
    _run(manager, BATCH, background=True)   # the newcomer's take HOST; the agent's are dropped
    _run(manager, AGENT)   # HOT's victims are the batch's: HOST is full, so they are dropped
    in_host = {block.hash for block in manager.blocks(Tier.HOST)}
    newcomer, batch = (set(manager.hash_prompt("t", tokens)[0]) for tokens in (NEWCOMER, BATCH))
    assert in_host == (newcomer if first else batch)   # LRU alone would keep the batch's, the newer


def test_host_loses_flex_blocks_before_older_default_ones() -> None:
    manager = _manager(hot=4, host=3)
    _run(manager, AGENT)
    _run(manager, BATCH, background=True)
    agent, batch = (manager.hash_prompt("t", tokens)[0] for tokens in (AGENT, BATCH))
    for block_hash in (agent[1], batch[1], batch[0]):
        manager.demote(manager.find(block_hash).id)
    manager.demote(manager.find(agent[0]).id)   # HOST is full: the batch's oldest goes, not the agent's
    assert {block.hash for block in manager.blocks(Tier.HOST)} == {agent[1], agent[0], batch[0]}
    assert manager.stats().tiers[Tier.HOST].num_background_evictions == 1


def test_a_promoted_flex_block_is_not_its_own_victim() -> None:
    manager = _manager(hot=2, host=2)
    _run(manager, BATCH, background=True)
    _run(manager, AGENT)   # the batch's blocks are demoted into HOST
    assert _cached_tokens(manager, BATCH) == 4
    assert all(block.is_background for block in manager.blocks(Tier.HOST))
    _run(manager, BATCH, background=True)   # promoted back: the agent's blocks make room
    assert _cached_tokens(manager, BATCH) == 4
    assert {block.hash for block in manager.blocks(Tier.HOT)} == set(manager.hash_prompt("t", BATCH)[0])


@pytest.mark.parametrize("reserved", [True, False])
def test_a_tenant_within_its_guaranteed_share_keeps_its_flex_blocks(reserved: bool) -> None:
    """`quiet` runs a batch (flex) within its reserved share of HOT while `noisy`'s agents
    need room: with reservations, noisy's own older blocks go instead; without, the
    batch's blocks go first, as everywhere."""
    policy = make_policy("predictive", static_shares=(("quiet", 0.5), ("noisy", 0.5)) if reserved else None,
                         reserve_frac=0.8 if reserved else 0.0)
    manager = BlockManager(num_hot_blocks=6, block_size=SIZE, policy=policy, clock=Clock())
    manager.tick()

    def run(tenant: str, tokens: list[int], background: bool = False) -> None:
        hashes, blocks = manager.hash_prompt(tenant, tokens)
        held = [block_id for block_id, _ in manager.commit(tenant, tenant, hashes, blocks, 0, background=background)]
        manager.release(held)

    def cached(tenant: str, tokens: list[int]) -> int:
        hashes, blocks = manager.hash_prompt(tenant, tokens)
        return manager.match(tenant, hashes, blocks).num_hot_tokens

    run("quiet", BATCH, background=True)
    run("noisy", AGENT)
    run("noisy", NEWCOMER)
    run("noisy", [13, 14, 15, 16])   # HOT is full: two blocks must go
    assert cached("quiet", BATCH) == (4 if reserved else 0)
    held = Counter(block.tenant for block in manager.blocks(Tier.HOT))
    assert held == ({"quiet": 2, "noisy": 4} if reserved else {"noisy": 6})
