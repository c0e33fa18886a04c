"""Copying a cached prefix between two runners: through shared memory, or as bytes when
the workers share no memory (Ray); either way the importer serves the prefix as if it
had computed it, and leaks no reference."""
from __future__ import annotations

import random

import pytest
import torch

from cache.tiers import Tier
from shards.kv_transfer import (export_prefix, export_prefix_bytes, import_prefix,
                                import_prefix_bytes, measure_costs)
from shards.model_runner import ModelRunner

BLOCK = 16


def _tokens(seed: int, n: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(250) for _ in range(n)]


def _pair(loaded):
    return (ModelRunner(loaded, num_hot_blocks=32, block_size=BLOCK),
            ModelRunner(loaded, num_hot_blocks=32, block_size=BLOCK))


def _copy(source, target, prompt, inline: bool, max_blocks: int, first_block: int = 0) -> tuple[int, int]:
    """Copy `prompt`'s cached blocks from `first_block` on, as bytes (`inline`, the payload's
    size checked) or through shared memory: (blocks exported, blocks imported)."""
    if inline:
        payload, num_blocks = export_prefix_bytes(source, "t", prompt, max_blocks=max_blocks, first_block=first_block)
        assert len(payload) == num_blocks * source.layout.bytes_per_block
        return num_blocks, import_prefix_bytes(target, "t", "s", prompt, payload, num_blocks, first_block=first_block)
    name, num_blocks = export_prefix(source, "t", prompt, max_blocks=max_blocks, first_block=first_block)
    return num_blocks, import_prefix(target, "t", "s", prompt, name, num_blocks, first_block=first_block)


def _assert_served_from_the_copy(source, target, prompt, reference, num_cached: int) -> None:
    """`target` serves `prompt` with `num_cached` tokens cached and the logits computing it
    whole gave; neither runner holds a reference."""
    logits, cached = target.prompt_logits("t", prompt)
    assert cached == num_cached
    torch.testing.assert_close(logits, reference[num_cached:], atol=1e-4, rtol=0)
    for runner in (source, target):
        assert all(b.ref_count == 0 for b in runner.blocks.blocks(Tier.HOT))


@pytest.mark.parametrize("inline", [False, True], ids=["shared-memory", "bytes"])
def test_a_copied_prefix_serves_the_same_logits_as_computing_it(tiny_loaded, inline):
    prompt = _tokens(1, 75)  # 4 full blocks and a partial one
    source, target = _pair(tiny_loaded)
    reference, _ = source.prompt_logits("t", prompt)
    num_blocks, imported = _copy(source, target, prompt, inline, max_blocks=8)
    assert num_blocks == imported == 4
    _assert_served_from_the_copy(source, target, prompt, reference, 64)


def test_export_caps_at_max_blocks_and_finds_nothing_for_another_tenant(tiny_loaded):
    prompt = _tokens(2, 80)
    source, _ = _pair(tiny_loaded)
    source.prompt_logits("t", prompt)
    payload, num_blocks = export_prefix_bytes(source, "t", prompt, max_blocks=2)
    assert num_blocks == 2 and len(payload) == 2 * source.layout.bytes_per_block
    assert export_prefix_bytes(source, "other", prompt, max_blocks=8) == (None, 0)
    assert export_prefix(source, "other", prompt, max_blocks=8) == (None, 0)


def test_bytes_of_the_wrong_size_are_refused_and_nothing_is_registered(tiny_loaded):
    prompt = _tokens(3, 64)
    source, target = _pair(tiny_loaded)
    source.prompt_logits("t", prompt)
    payload, num_blocks = export_prefix_bytes(source, "t", prompt, max_blocks=4)
    with pytest.raises(ValueError, match="cannot hold 4 blocks"):
        import_prefix_bytes(target, "t", None, prompt, payload[:-1], num_blocks)
    assert target.blocks.num_used_hot_blocks == 0


def test_importing_blocks_already_cached_copies_nothing_new(tiny_loaded):
    prompt = _tokens(4, 64)
    source, target = _pair(tiny_loaded)
    source.prompt_logits("t", prompt)
    target.prompt_logits("t", prompt)
    before = target.hot.data.clone()
    payload, num_blocks = export_prefix_bytes(source, "t", prompt, max_blocks=4)
    assert import_prefix_bytes(target, "t", None, prompt, payload, num_blocks) == 4
    # bit for bit: slots never written hold whatever the allocator gave (NaN included)
    assert torch.equal(target.hot.data.view(torch.uint8), before.view(torch.uint8))


@pytest.mark.parametrize("inline", [False, True], ids=["shared-memory", "bytes"])
def test_cost_probe_measures_both_copy_paths_and_leaves_the_cache_alone(tiny_loaded, inline):
    runner = ModelRunner(tiny_loaded, num_hot_blocks=16, block_size=BLOCK)
    costs = measure_costs(runner, inline=inline)
    assert costs.prefill_s_per_token > 0
    assert costs.export_s_per_block > 0 and costs.import_s_per_block > 0
    assert runner.blocks.num_used_hot_blocks == 0


def _fail_writes(monkeypatch):
    def failing(*_args, **_kwargs):
        raise RuntimeError("injected: the KV write failed")

    monkeypatch.setattr(torch.Tensor, "index_copy_", failing)


@pytest.mark.parametrize("inline", [False, True], ids=["shared-memory", "bytes"])
def test_a_failed_kv_write_leaves_no_imported_block_matchable_and_the_prompt_is_prefilled(tiny_loaded, monkeypatch,
                                                                                          inline):
    prompt = _tokens(5, 75)
    source, target = _pair(tiny_loaded)
    reference, _ = source.prompt_logits("t", prompt)
    hashes, blocks = target.blocks.hash_prompt("t", prompt)
    with monkeypatch.context() as patched:
        _fail_writes(patched)
        with pytest.raises(RuntimeError, match="injected"):
            if inline:
                payload, num_blocks = export_prefix_bytes(source, "t", prompt, max_blocks=8)
                import_prefix_bytes(target, "t", "s", prompt, payload, num_blocks)
            else:
                name, num_blocks = export_prefix(source, "t", prompt, max_blocks=8)
                import_prefix(target, "t", "s", prompt, name, num_blocks)
    assert target.blocks.match("t", hashes, blocks).num_blocks == 0
    assert target.blocks.num_used_hot_blocks == 0
    logits, cached = target.prompt_logits("t", prompt)   # the next request computes the prefix
    assert cached == 0
    torch.testing.assert_close(logits, reference, atol=1e-4, rtol=0)


def test_a_failed_kv_write_keeps_the_blocks_the_importer_held_before(tiny_loaded, monkeypatch):
    prompt = _tokens(6, 96)   # 6 blocks; the importer holds the first 2
    source, target = _pair(tiny_loaded)
    source.prompt_logits("t", prompt)
    target.prompt_logits("t", prompt[:40])
    hashes, blocks = target.blocks.hash_prompt("t", prompt)
    payload, num_blocks = export_prefix_bytes(source, "t", prompt, max_blocks=6)
    with monkeypatch.context() as patched:
        _fail_writes(patched)
        with pytest.raises(RuntimeError, match="injected"):
            import_prefix_bytes(target, "t", "s", prompt, payload, num_blocks)
    assert target.blocks.match("t", hashes, blocks).num_blocks == 2
    assert all(b.ref_count == 0 for b in target.blocks.blocks(Tier.HOT))


@pytest.mark.parametrize("inline", [False, True], ids=["shared-memory", "bytes"])
def test_a_copy_ships_only_the_blocks_past_what_the_importer_holds(tiny_loaded, inline):
    prompt = _tokens(7, 100)   # 6 full blocks; the importer holds the first 2
    source, target = _pair(tiny_loaded)
    reference, _ = source.prompt_logits("t", prompt)
    target.prompt_logits("t", prompt[:40])
    num_blocks, imported = _copy(source, target, prompt, inline, max_blocks=6, first_block=2)
    assert num_blocks == imported == 4
    _assert_served_from_the_copy(source, target, prompt, reference, 96)


def test_a_tail_whose_head_the_importer_lost_is_not_imported(tiny_loaded):
    prompt = _tokens(8, 100)
    source, target = _pair(tiny_loaded)
    source.prompt_logits("t", prompt)
    payload, num_blocks = export_prefix_bytes(source, "t", prompt, max_blocks=6, first_block=2)
    assert import_prefix_bytes(target, "t", "s", prompt, payload, num_blocks, first_block=2) == 0
    assert target.blocks.num_used_hot_blocks == 0
    _, cached = target.prompt_logits("t", prompt)
    assert cached == 0
