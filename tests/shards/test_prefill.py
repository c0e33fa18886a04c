"""Chunked prefill equals a one-pass prefill, and holds no references after abort."""
from __future__ import annotations

import random

import pytest

from cache.tiers import Tier
from shards.model_runner import ModelRunner
from shards.prefill import ChunkedPrefill
from shards.protocol import SamplingParams, WorkItem


def _generate_chunked(runner, tokenizer, item, chunk_tokens):
    prefill = ChunkedPrefill(runner, tokenizer, chunk_tokens)
    task = prefill.begin(item)
    num_chunks = 1
    token = prefill.advance(task)
    while token is None:
        num_chunks += 1
        token = prefill.advance(task)
    seq = task.seq
    runner.commit_prompt(seq)
    for _ in range(item.sampling.max_tokens - 1):
        runner.step(seq)
    runner.finish(seq)
    return seq, num_chunks


@pytest.mark.parametrize("chunk_tokens", [7, 32, 1000])
def test_chunked_prefill_generates_what_a_one_pass_prefill_generates(tiny_loaded, chunk_tokens):
    rng = random.Random(chunk_tokens)
    prompt = [rng.randrange(250) for _ in range(90)]
    item = WorkItem("r", "t", prompt, SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True))
    reference = ModelRunner(tiny_loaded, num_hot_blocks=32)
    seq, _ = reference.start(item, tiny_loaded.tokenizer)
    reference.commit_prompt(seq)
    for _ in range(7):
        reference.step(seq)
    reference.finish(seq)
    runner = ModelRunner(tiny_loaded, num_hot_blocks=32)
    chunked, num_chunks = _generate_chunked(runner, tiny_loaded.tokenizer, item, chunk_tokens)
    assert chunked.output_ids == seq.output_ids
    assert num_chunks == -(-90 // chunk_tokens)
    again, num_chunks = _generate_chunked(runner, tiny_loaded.tokenizer, item, chunk_tokens)
    assert again.num_cached_tokens == 80 and again.output_ids == seq.output_ids
    assert num_chunks == -(-10 // chunk_tokens)


def test_chunked_prefill_abort_releases_the_cached_prefix(tiny_loaded):
    runner = ModelRunner(tiny_loaded, num_hot_blocks=32)
    prompt = list(range(64))
    runner.prompt_logits("t", prompt)
    prefill = ChunkedPrefill(runner, tiny_loaded.tokenizer, 16)
    task = prefill.begin(WorkItem("r", "t", prompt + [1, 2], SamplingParams(max_tokens=2)))
    assert task.seq.num_cached_tokens == 64 and task.num_remaining_tokens == 2
    prefill.abort(task)
    assert all(b.ref_count == 0 for b in runner.blocks.blocks(Tier.HOT))


@pytest.mark.parametrize("chunk_tokens", [7, 1000])
def test_prompt_logprobs_are_each_prompt_tokens_under_a_full_recompute(tiny_loaded, chunk_tokens):
    import torch

    rng = random.Random(5)
    prompt = [rng.randrange(250) for _ in range(40)]
    runner = ModelRunner(tiny_loaded, num_hot_blocks=32)
    reference, _ = ModelRunner(tiny_loaded, num_hot_blocks=32).prompt_logits("t", prompt)
    expected = torch.log_softmax(reference.float(), dim=-1)
    runner.prompt_logits("t", prompt)  # the prompt is cached now: prompt log probabilities skip the cache
    item = WorkItem("r", "t", prompt, SamplingParams(max_tokens=2, temperature=0.0, prompt_logprobs=2))
    prefill = ChunkedPrefill(runner, tiny_loaded.tokenizer, chunk_tokens)
    task = prefill.begin(item)
    assert task.seq.num_cached_tokens == 0
    while prefill.advance(task) is None:
        pass
    scores = task.seq.prompt_logprobs
    assert [s.token_id for s in scores] == prompt[1:]  # the first token has none
    for position, score in enumerate(scores):
        assert score.logprob == pytest.approx(float(expected[position, prompt[position + 1]]), abs=1e-3)
        assert [t for t, _ in score.top] == expected[position].topk(2).indices.tolist()
    prefill.runner.release(task.seq)


def test_a_flex_requests_blocks_are_background_until_a_default_request_uses_them(tiny_loaded):
    """The worker's path (chunked prefill, prompt commit, finish) marks a flex request's
    blocks for eviction first (cache.background_blocks) and a default request's use unmarks them."""
    rng = random.Random(3)
    prompt = [rng.randrange(250) for _ in range(70)]
    params = SamplingParams(max_tokens=20, temperature=0.0, ignore_eos=True)
    runner = ModelRunner(tiny_loaded, num_hot_blocks=32)
    _generate_chunked(runner, tiny_loaded.tokenizer, WorkItem("r1", "t", prompt, params, flex=True), 32)
    blocks = runner.blocks.blocks(Tier.HOT)
    assert len(blocks) == (70 + 19) // 16 and all(b.is_background for b in blocks)   # prompt and reply
    again, _ = _generate_chunked(runner, tiny_loaded.tokenizer, WorkItem("r2", "t", prompt, params), 32)
    assert again.num_cached_tokens == 64
    # greedy, so the same reply: the reply's block is the default request's too
    assert not any(b.is_background for b in runner.blocks.blocks(Tier.HOT))
