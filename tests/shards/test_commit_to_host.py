"""A prompt whose commit finds the hot tier full of blocks in use is written to the host
tier from the request's own KV: the next request with that prompt gets host hits, with
the logits of a cold run."""
from __future__ import annotations

import random

import torch

from cache.tiers import Tier
from shards.model_runner import ModelRunner
from shards.protocol import SamplingParams, WorkItem

BLOCK = 16
PARAMS = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)


def _tokens(seed: int, n: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(250) for _ in range(n)]


def _started(runner: ModelRunner, tiny_loaded, request_id: str, prompt: list[int]):
    seq, _ = runner.start(WorkItem(request_id, "t", prompt, PARAMS), tiny_loaded.tokenizer)
    runner.commit_prompt(seq)
    return seq


def _run_beside_a_full_hot_tier(tiny_loaded, num_host_blocks: int):
    """Request `a` holds every HOT block while request `b` runs; then `b`'s prompt again."""
    runner = ModelRunner(tiny_loaded, num_hot_blocks=4, num_host_blocks=num_host_blocks, block_size=BLOCK)
    holder = _started(runner, tiny_loaded, "a", _tokens(1, 4 * BLOCK + 5))   # its 4 blocks fill HOT
    assert runner.blocks.num_free_hot_blocks == 0
    prompt = _tokens(2, 3 * BLOCK + 7)
    seq = _started(runner, tiny_loaded, "b", prompt)
    runner.step(seq)
    runner.finish(seq)
    host_blocks = runner.blocks.stats().tiers[Tier.HOST].num_cached_blocks
    runner.finish(holder)
    logits, cached = runner.prompt_logits("t", prompt)
    return logits, cached, host_blocks, prompt


def test_short_prompt_commit_goes_to_host_and_comes_back_with_cold_logits(tiny_loaded):
    logits, cached, host_blocks, prompt = _run_beside_a_full_hot_tier(tiny_loaded, num_host_blocks=8)
    assert host_blocks == 3                    # the prompt's 3 full blocks, written from its own KV
    assert cached == 3 * BLOCK                 # a host hit (promoted back on use), not a recompute
    cold = ModelRunner(tiny_loaded, num_hot_blocks=16, block_size=BLOCK)
    reference, none_cached = cold.prompt_logits("t", prompt)
    assert none_cached == 0
    torch.testing.assert_close(logits, reference[cached:], atol=1e-4, rtol=0)


def test_no_host_tier_drops_the_short_commit_as_before(tiny_loaded):
    _, cached, _, _ = _run_beside_a_full_hot_tier(tiny_loaded, num_host_blocks=0)
    assert cached == 0


def test_finish_writes_the_output_blocks_through_too(tiny_loaded):
    runner = ModelRunner(tiny_loaded, num_hot_blocks=4, num_host_blocks=8, block_size=BLOCK)
    holder = _started(runner, tiny_loaded, "a", _tokens(1, 4 * BLOCK + 5))
    prompt = _tokens(3, 2 * BLOCK - 2)   # one full block now; a second one once 2 tokens are decoded
    seq = _started(runner, tiny_loaded, "b", prompt)
    for _ in range(3):
        runner.step(seq)
    runner.finish(seq)
    tokens = seq.token_ids
    runner.finish(holder)
    reference, _ = ModelRunner(tiny_loaded, num_hot_blocks=16, block_size=BLOCK).prompt_logits("t", tokens)
    logits, cached = runner.prompt_logits("t", tokens)
    assert cached == 2 * BLOCK
    torch.testing.assert_close(logits, reference[cached:], atol=1e-4, rtol=0)
