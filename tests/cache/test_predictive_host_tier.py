"""The predictive policy's HOST tier once it is full (QA152 finding 1): a HOT victim is
demoted or dropped on values taken at the same instant and from the same kind of time
(the blocks' last use), so blocks without a trusted forecast move through HOST as under
LRU, however fast requests come."""
from __future__ import annotations

import random

import pytest

from cache.block_manager import BlockManager
from cache.block_meta import BlockMeta, LineageId
from cache.hashing import BlockHash
from cache.policies import make_policy
from cache.policies.groups import GroupIndex
from cache.tiers import Tier


class Clock:
    def __init__(self, now_s: float = 0.0) -> None:
        self.now_s = now_s

    def __call__(self) -> float:
        return self.now_s


def serve(mgr: BlockManager, clock: Clock, tokens: list[int], session: str | None = None,
          step_s: float = 0.0) -> tuple[int, int]:
    """One request of tenant "t": looked up, filled, then released `step_s` later (the
    clock moves on `step_s` again); returns (HOT, HOST) blocks found cached."""
    mgr.tick(clock.now_s)
    hashes, blocks = mgr.hash_prompt("t", tokens)
    match = mgr.match("t", hashes, blocks)
    held = mgr.acquire("t", session, match, len(tokens))
    held += [block_id for block_id, _ in mgr.commit("t", session, hashes, blocks, len(held))]
    clock.now_s += step_s
    mgr.release(held)
    clock.now_s += step_s
    return len(match.hot_block_ids), len(match.host_block_ids)


def tier_of(mgr: BlockManager, tokens: list[int]) -> Tier | None:
    hashes, _ = mgr.hash_prompt("t", tokens)
    found = mgr.find(hashes[0])
    return None if found is None else found.tier


def random_prompt(seed: int, num_tokens: int = 200) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(3, 250) for _ in range(num_tokens)]


@pytest.mark.parametrize("sessions", [False, True])
@pytest.mark.parametrize("step_s", [0.02, 1.0])
@pytest.mark.parametrize("name", ["lru", "predictive"])
def test_a_prompt_pushed_out_of_hot_is_found_in_host_as_under_lru(name: str, step_s: float, sessions: bool) -> None:
    """24 HOT and 48 HOST blocks of 16 tokens, 12-block prompts: after six fill both tiers,
    each trial sends P, two others, then P again (36 blocks between P's sends, under the
    72 of memory). Requests 0.02 s apart is a gateway's pace: HOST must not freeze."""
    clock = Clock(1000.0)
    mgr = BlockManager(num_hot_blocks=24, num_host_blocks=48, block_size=16, policy=make_policy(name), clock=clock)

    def send(seed: int) -> tuple[int, int]:
        return serve(mgr, clock, random_prompt(seed), f"s{seed}" if sessions else None, step_s)

    for seed in range(6):
        send(seed)
    found = []
    for trial in range(12):
        send(100 + trial)
        send(1000 + 2 * trial)
        send(1001 + 2 * trial)
        found.append(sum(send(100 + trial)))
    assert found == [12] * 12


@pytest.mark.parametrize("name", ["lru", "predictive"])
def test_a_victim_used_after_host_blocks_is_demoted_over_them(name: str) -> None:
    """HOT 2 and HOST 1 block: X (last used at 0) is demoted at 0.2; at 0.3, Y (last used
    at 0.1) is pushed out of HOT. Y was used after X, so Y replaces X in HOST (LRU's
    choice), though X was demoted after Y's last use."""
    clock = Clock()
    mgr = BlockManager(num_hot_blocks=2, num_host_blocks=1, block_size=2, policy=make_policy(name), clock=clock)
    x, y, z, w = [1, 2], [3, 4], [5, 6], [7, 8]
    for tokens in (x, y, z):
        serve(mgr, clock, tokens)
        clock.now_s += 0.1
    assert [tier_of(mgr, tokens) for tokens in (x, y, z)] == [Tier.HOST, Tier.HOT, Tier.HOT]
    serve(mgr, clock, w)
    assert [tier_of(mgr, tokens) for tokens in (x, y, z, w)] == [None, Tier.HOST, Tier.HOT, Tier.HOT]


def test_should_demote_values_host_now_not_when_it_was_ranked() -> None:
    """HOST's only group (X, last used at 0) was ranked at 0.1, when it was demoted, and
    is not due again before 0.6. At 0.4 the HOT victim Y (last used at 0.2) is fresher
    than X: the heap's value of X, from 0.1, must not be what Y is compared with."""
    clock = Clock()
    policy = make_policy("predictive")
    mgr = BlockManager(num_hot_blocks=1, num_host_blocks=1, block_size=2, policy=policy, clock=clock)
    x, y = [1, 2], [3, 4]
    serve(mgr, clock, x)             # X used at 0
    clock.now_s = 0.1
    serve(mgr, clock, y, step_s=0.1)   # X demoted at 0.1; Y released at 0.2
    assert [tier_of(mgr, tokens) for tokens in (x, y)] == [Tier.HOST, Tier.HOT]
    y_block = mgr.find(mgr.hash_prompt("t", y)[0][0])
    assert policy.should_demote(y_block, 0.4)
    clock.now_s = 0.4
    serve(mgr, clock, [5, 6])        # through the manager: Y replaces X in HOST
    assert [tier_of(mgr, tokens) for tokens in (x, y)] == [None, Tier.HOST]


def test_a_group_gives_up_its_least_recently_used_block_first() -> None:
    """Blocks filed together (one sessionless span) leave in LRU order, the deepest first
    among blocks used at the same time; a re-filed block's older entry is dead."""
    def block(uid: int, position: int, last_access_s: float) -> BlockMeta:
        return BlockMeta(id=uid, tier=Tier.HOST, uid=LineageId(uid), hash=BlockHash(uid), tokens=(), tenant="t",
                         salt=b"", parent_hash=None, parent_uid=None, position=position,
                         last_access_s=last_access_s)

    index = GroupIndex()
    old_root, new_prefix, new_tail = block(1, 0, 0.1), block(2, 2, 0.3), block(3, 3, 0.3)
    for meta in (new_prefix, new_tail, old_root):
        group, _ = index.add(meta, 0.5)
    assert GroupIndex.victim(group) is old_root   # not the deepest: used longest ago
    index.remove(old_root)
    assert GroupIndex.victim(group) is new_tail
    index.remove(new_tail)
    new_tail.last_access_s = 0.6     # used again, then filed again
    index.add(new_tail, 0.6)
    assert GroupIndex.victim(group) is new_prefix
