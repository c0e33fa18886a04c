"""A write-through never leaves a block registered behind a lost one (QA184 F1).

Random runs of the worker's flow on small tiers (`acquire_run`, `release_host`, `commit`,
`commit_to_host`, `release`), every policy: after each write-through, the chain up to its
last placed block is matchable whole, and each tier's slots add up. Predictive re-ranks
its HOST values in `should_demote`, so the victim it evicts can differ from the one it was
asked for, and can be a block of the request's own prefix: the blocks written through past
it must then not be placed."""
from __future__ import annotations

import random

import pytest

from cache.block_manager import BlockManager
from cache.lineage import verified_run
from cache.policies import make_policy
from shards.prefix_reads import commit_start

BLOCK_SIZE = 4


class Clock:
    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


def _check_slots(manager: BlockManager) -> None:
    for pool in (manager._residency.hot, manager._residency.host):
        assert len(list(pool.blocks())) + pool.num_free_blocks == pool.num_blocks, pool.tier


def _run(policy: str, seed: int, num_steps: int, num_hot: int, num_host: int) -> int:
    """The number of write-throughs that placed blocks (all checked)."""
    rng = random.Random(seed)
    clock = Clock()
    manager = BlockManager(num_hot_blocks=num_hot, num_host_blocks=num_host, block_size=BLOCK_SIZE,
                           policy=make_policy(policy), clock=clock)
    prompts = {s: ([1, 2, 3, 4, 5, 6, 7, 8] if s % 2 else [9, 9, 8, 8])
               + [rng.randrange(10, 200) for _ in range(rng.randrange(4, 30))] for s in range(10)}
    prefilling, running, num_checked = [], [], 0
    for _ in range(num_steps):
        clock.now_s += rng.random() * 0.3
        op = rng.random()
        if op < 0.35:   # a request arrives: its HOT match held, its HOST part read through and let go
            s = rng.randrange(10)
            tenant, tokens, background = f"t{s % 3}", prompts[s], rng.random() < 0.1   # some flex requests
            hashes, blocks = manager.hash_prompt(tenant, tokens)
            run = manager.acquire_run(tenant, f"s{s}", manager.match(tenant, hashes, blocks), len(tokens),
                                      background=background)
            manager.release_host(run.host_ids)
            prefilling.append((s, tenant, tokens, background, list(run.hot_ids),
                               min(run.num_blocks * BLOCK_SIZE, len(tokens) - 1)))
        elif op < 0.7 and prefilling:   # its prefill ends: commit, the rest written through to HOST
            s, tenant, tokens, background, held, num_cached = prefilling.pop(rng.randrange(len(prefilling)))
            hashes, blocks = manager.hash_prompt(tenant, tokens)
            start = commit_start(manager, held, num_cached)
            if len(tokens) // BLOCK_SIZE > start:
                placed = manager.commit(tenant, f"s{s}", hashes, blocks, start, background=background)
                held += [block_id for block_id, _ in placed]
                if start + len(placed) < len(tokens) // BLOCK_SIZE:
                    written = manager.commit_to_host(tenant, f"s{s}", hashes, blocks, start + len(placed),
                                                     background=background)
                    if written:
                        matchable = verified_run(manager._residency.find, manager.salt_for(tenant), hashes, blocks,
                                                 len(hashes))
                        assert len(matchable) > max(position for position, _ in written), (policy, seed, written)
                        num_checked += 1
            running.append(held)
            prompts[s] = tokens + [rng.randrange(10, 200) for _ in range(rng.randrange(2, 12))]
        elif running:
            manager.release(running.pop(rng.randrange(len(running))))
        _check_slots(manager)
    return num_checked


@pytest.mark.parametrize("policy", ["predictive", "lru", "ttl", "kvflow"])
def test_a_write_through_is_matchable_up_to_its_last_placed_block(policy):
    num_checked = sum(_run(policy, seed, 300, num_hot, num_host)
                      for seed in range(6) for num_hot, num_host in ((8, 24), (4, 6), (6, 12), (3, 4)))
    assert num_checked > 50   # the write-through path ran


def test_the_case_qa184_found():
    """Predictive, hot 8 / host 24: at step 56 a request that read its 3 HOST blocks through
    wrote 2 blocks through, then room for a third came from its own prefix block 2."""
    assert _run("predictive", 4, 80, 8, 24) > 0
