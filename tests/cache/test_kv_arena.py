from __future__ import annotations

import torch

from cache.kv_arena import ArenaMover, KVArena, KVLayout
from cache.tiers import Tier

LAYOUT = KVLayout(num_layers=2, num_kv_heads=2, head_dim=4, block_size=4)


def _layer_kvs(num_tokens):
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(1, 2, num_tokens, 4, generator=g), torch.randn(1, 2, num_tokens, 4, generator=g))
            for _ in range(LAYOUT.num_layers)]


def test_arena_gather_returns_written_tokens_for_any_block_order():
    arena = KVArena(LAYOUT, num_blocks=8)
    kvs = _layer_kvs(12)
    arena.write([5, 1, 6], kvs, first_token=0)  # scattered slots
    for ids in ([5, 1, 6], [1, 2, 3]):
        if ids == [1, 2, 3]:
            arena.write([1, 2, 3], kvs, first_token=0)  # consecutive slots: the view path
        got = arena.gather(ids, num_tokens=10)  # a cut inside the last block
        for (k, v), (rk, rv) in zip(got, kvs):
            assert torch.equal(k, rk[:, :, :10]) and torch.equal(v, rv[:, :, :10])


def test_arena_mover_copies_between_tiers():
    hot, host = KVArena(LAYOUT, 4), KVArena(LAYOUT, 4)
    hot.write([2], _layer_kvs(4), first_token=0)
    ArenaMover(hot, host).copy_block(Tier.HOT, 2, Tier.HOST, 0)
    assert torch.equal(host.data[:, :, :, 0], hot.data[:, :, :, 2])


def test_layout_bytes_per_block_counts_keys_and_values():
    assert LAYOUT.bytes_per_block == 2 * 2 * 2 * 4 * 4 * 4


def test_arena_read_is_a_copy_that_outlives_a_rewrite_of_its_slots():
    """What a request reads through from the host tier stays its own once the slots are
    written again (the consecutive-ids case, where `gather` is a view)."""
    arena = KVArena(LAYOUT, num_blocks=4)
    kvs = _layer_kvs(8)
    arena.write([1, 2], kvs, first_token=0)
    got = arena.read([1, 2], num_tokens=7, device=torch.device("cpu"))
    arena.write([1, 2], [(k + 1, v + 1) for k, v in kvs], first_token=0)   # the slots reused
    for (k, v), (rk, rv) in zip(got, kvs):
        assert torch.equal(k, rk[:, :, :7]) and torch.equal(v, rv[:, :, :7])
