"""A host match the hot tier has no room to promote (every hot slot held by a running
request) is read straight from the host arena into the request's cache: all of it is a
hit, the logits equal a full recompute, and the request's commits start past it."""
from __future__ import annotations

import random

import torch

from cache.tiers import Tier
from shards.model_runner import ModelRunner
from shards.prefill import ChunkedPrefill
from shards.protocol import SamplingParams, WorkItem

BLOCK = 16
PARAMS = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)


def _tokens(seed: int, n: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(250) for _ in range(n)]


PROMPT = _tokens(2, 3 * BLOCK + 7)   # 3 full blocks


def _host_prompt_beside_a_full_hot_tier(tiny_loaded, num_host_blocks: int = 8):
    """PROMPT's 3 blocks demoted to the host tier, and request `a` holding all 4 hot blocks."""
    runner = ModelRunner(tiny_loaded, num_hot_blocks=4, num_host_blocks=num_host_blocks, block_size=BLOCK)
    runner.prompt_logits("t", PROMPT)
    holder, _ = runner.start(WorkItem("a", "t", _tokens(1, 4 * BLOCK + 5), PARAMS), tiny_loaded.tokenizer)
    runner.commit_prompt(holder)
    assert runner.blocks.num_free_hot_blocks == 0 and len(holder.block_ids) == 4
    assert runner.blocks.stats().tiers[Tier.HOST].num_cached_blocks == 3
    return runner, holder


def _check_all_released(runner: ModelRunner) -> None:
    stats = runner.blocks.stats()
    assert stats.num_referenced_blocks == 0
    for tier in Tier:
        counts = stats.tiers[tier]
        assert counts.num_free_blocks + counts.num_used_blocks == counts.num_blocks


def _cold(tiny_loaded, tokens: list[int]) -> torch.Tensor:
    reference, cached = ModelRunner(tiny_loaded, num_hot_blocks=16, block_size=BLOCK).prompt_logits("t", tokens)
    assert cached == 0
    return reference


def test_a_three_block_host_match_beside_a_full_hot_tier_is_all_hits_with_cold_logits(tiny_loaded):
    runner, holder = _host_prompt_beside_a_full_hot_tier(tiny_loaded)
    before = runner.blocks.stats().tenants["t"].num_host_hit_tokens
    logits, cached = runner.prompt_logits("t", PROMPT)
    assert cached == 3 * BLOCK                                  # read through, not recomputed
    assert runner.blocks.stats().tenants["t"].num_host_hit_tokens - before == 3 * BLOCK
    assert runner.blocks.stats().num_promotions == 0           # no hot slot was used
    torch.testing.assert_close(logits, _cold(tiny_loaded, PROMPT)[cached:], atol=1e-4, rtol=0)
    assert runner.blocks.stats().num_referenced_blocks == 4    # the holder's alone
    runner.finish(holder)
    _check_all_released(runner)


def test_a_read_through_request_commits_past_the_read_blocks_and_links_to_them(tiny_loaded):
    """The request's new blocks (its prompt's 4th and 5th, then its output's) go to the
    host tier, after the read ones, which are neither written again nor counted again;
    once the holder is gone the whole chain matches, with cold logits and tokens."""
    runner, holder = _host_prompt_beside_a_full_hot_tier(tiny_loaded, num_host_blocks=16)
    prompt = PROMPT[:3 * BLOCK] + _tokens(3, 2 * BLOCK + 3)   # the 3 host blocks, then 2 new ones
    seq, _ = runner.start(WorkItem("b", "t", prompt, PARAMS), tiny_loaded.tokenizer)
    assert seq.num_cached_tokens == 3 * BLOCK and seq.block_ids == []
    runner.commit_prompt(seq)
    assert runner.blocks.stats().num_host_commits == 2         # blocks 3 and 4, not 0..2 again
    for _ in range(PARAMS.max_tokens - 1):
        runner.step(seq)
    runner.finish(seq)
    runner.finish(holder)
    _check_all_released(runner)
    tokens = seq.token_ids
    logits, cached = runner.prompt_logits("t", tokens)
    assert cached == len(tokens) // BLOCK * BLOCK              # prompt and output, through the read blocks
    torch.testing.assert_close(logits, _cold(tiny_loaded, tokens)[cached:], atol=1e-4, rtol=0)
    cold_runner = ModelRunner(tiny_loaded, num_hot_blocks=16, block_size=BLOCK)
    cold_seq, _ = cold_runner.start(WorkItem("c", "t", prompt, PARAMS), tiny_loaded.tokenizer)
    for _ in range(PARAMS.max_tokens - 1):
        cold_runner.step(cold_seq)
    assert cold_seq.output_ids == seq.output_ids


def test_the_workers_chunked_prefill_reads_through_too(tiny_loaded):
    runner, holder = _host_prompt_beside_a_full_hot_tier(tiny_loaded)
    prefill = ChunkedPrefill(runner, tiny_loaded.tokenizer, chunk_tokens=8)
    task = prefill.begin(WorkItem("b", "t", PROMPT, PARAMS))
    assert task.num_done_tokens == 3 * BLOCK
    token = None
    while token is None:
        token = prefill.advance(task)
    runner.commit_prompt(task.seq)
    runner.finish(task.seq)
    cold_runner = ModelRunner(tiny_loaded, num_hot_blocks=16, block_size=BLOCK)
    _, cold_token = cold_runner.start(WorkItem("c", "t", PROMPT, PARAMS), tiny_loaded.tokenizer)
    assert token == cold_token
    runner.finish(holder)
    _check_all_released(runner)


def test_a_prompt_cut_at_its_last_token_reads_only_the_blocks_it_uses(tiny_loaded):
    """A prompt of exactly 3 blocks, all in the host tier: 47 tokens are reused (one is
    always computed); all 3 blocks are read (the last one in part), none is left held."""
    runner, holder = _host_prompt_beside_a_full_hot_tier(tiny_loaded)
    prompt = PROMPT[:3 * BLOCK]
    logits, cached = runner.prompt_logits("t", prompt)
    assert cached == 3 * BLOCK - 1
    torch.testing.assert_close(logits, _cold(tiny_loaded, prompt)[cached:], atol=1e-4, rtol=0)
    assert runner.blocks.stats().num_host_commits == 0
    runner.finish(holder)
    _check_all_released(runner)
