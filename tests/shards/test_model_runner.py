"""Known-answer tests of prefix reuse: logits with a reused prefix == full recompute."""
from __future__ import annotations

import random

import pytest
import torch

from cache.tiers import Tier
from shards.model_runner import ModelRunner
from shards.protocol import SamplingParams, WorkItem

BLOCK = 16


def _runner(loaded, num_hot_blocks=64, num_host_blocks=0):
    return ModelRunner(loaded, num_hot_blocks=num_hot_blocks, num_host_blocks=num_host_blocks,
                       block_size=BLOCK)


def _tokens(rng, n, vocab=250):
    return [rng.randrange(vocab) for _ in range(n)]


@pytest.mark.parametrize("shared_prefix", [16, 37, 64, 95])
def test_prompt_logits_reused_prefix_equals_full_recompute(tiny_loaded, shared_prefix):
    rng = random.Random(shared_prefix)
    prefix = _tokens(rng, shared_prefix)
    prompt = prefix + _tokens(rng, 30)
    reference, cached = _runner(tiny_loaded).prompt_logits("t", prompt)
    assert cached == 0
    runner = _runner(tiny_loaded)
    runner.prompt_logits("t", prefix + _tokens(rng, 20))  # an earlier request sharing the prefix
    logits, cached = runner.prompt_logits("t", prompt)
    assert cached == shared_prefix // BLOCK * BLOCK  # only full blocks are reused
    assert cached > 0
    torch.testing.assert_close(logits, reference[cached:], atol=1e-4, rtol=0)


def test_prompt_logits_whole_prompt_cached_recomputes_last_token_mid_block(tiny_loaded):
    rng = random.Random(7)
    prompt = _tokens(rng, 64)  # 4 full blocks, all cached the second time
    runner = _runner(tiny_loaded)
    reference, _ = runner.prompt_logits("t", prompt)
    logits, cached = runner.prompt_logits("t", prompt)
    assert cached == 63  # a cut inside the last block: one token must be computed
    torch.testing.assert_close(logits, reference[-1:], atol=1e-4, rtol=0)


def test_prompt_logits_other_tenant_gets_no_reuse(tiny_loaded):
    rng = random.Random(3)
    prompt = _tokens(rng, 80)
    runner = _runner(tiny_loaded)
    runner.prompt_logits("tenant-a", prompt)
    _, cached = runner.prompt_logits("tenant-b", prompt)
    assert cached == 0


def test_start_generation_equals_recompute_with_reused_prefix(tiny_loaded):
    rng = random.Random(11)
    prompt = _tokens(rng, 70)
    params = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)

    def generate(runner):
        seq, token = runner.start(WorkItem("r", "t", prompt, params), tiny_loaded.tokenizer)
        runner.commit_prompt(seq)
        for _ in range(params.max_tokens - 1):
            runner.step(seq)
        runner.finish(seq)
        return seq

    runner = _runner(tiny_loaded)
    first = generate(runner)
    second = generate(runner)
    assert first.num_cached_tokens == 0
    assert second.num_cached_tokens == 64
    assert first.output_ids == second.output_ids
    assert runner.blocks.num_free_hot_blocks + runner.blocks.num_used_hot_blocks == 64


def test_finish_releases_every_reference(tiny_loaded):
    rng = random.Random(5)
    runner = _runner(tiny_loaded, num_hot_blocks=8)
    params = SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True)
    for i in range(6):  # more prompt blocks than the arena holds: eviction must find room
        prompt = _tokens(rng, 50)
        seq, _ = runner.start(WorkItem(f"r{i}", "t", prompt, params), tiny_loaded.tokenizer)
        runner.commit_prompt(seq)
        runner.step(seq)
        runner.finish(seq)
    assert all(b.ref_count == 0 for b in runner.blocks.blocks(Tier.HOT))


def test_host_tier_demoted_blocks_come_back_with_equal_logits(tiny_loaded):
    rng = random.Random(9)
    first = _tokens(rng, 64)
    runner = _runner(tiny_loaded, num_hot_blocks=4, num_host_blocks=16)
    reference, _ = runner.prompt_logits("t", first)
    runner.prompt_logits("t", _tokens(rng, 64))  # pushes `first` down to the host tier
    logits, cached = runner.prompt_logits("t", first)
    assert cached == 63
    torch.testing.assert_close(logits, reference[-1:], atol=1e-4, rtol=0)


def test_prefix_caching_off_never_reuses(tiny_loaded):
    rng = random.Random(4)
    prompt = _tokens(rng, 64)
    runner = ModelRunner(tiny_loaded, num_hot_blocks=16, block_size=BLOCK, prefix_caching=False)
    runner.prompt_logits("t", prompt)
    _, cached = runner.prompt_logits("t", prompt)
    assert cached == 0 and runner.blocks.num_used_hot_blocks == 0


def test_kv_slots_never_written_are_never_read(tiny_loaded):
    """The arenas start uninitialised on the CPU (kv_arena): poisoned with NaN here, every
    answer still equals a recompute — cold, reused mid-block, back from the host tier,
    and generated token by token."""
    rng = random.Random(21)
    prompt = _tokens(rng, 66)
    reference, _ = _runner(tiny_loaded).prompt_logits("t", prompt)
    runner = _runner(tiny_loaded, num_hot_blocks=8, num_host_blocks=16)
    runner.hot.data.fill_(float("nan"))
    runner.host.data.fill_(float("nan"))
    cold, cached = runner.prompt_logits("t", prompt)
    assert cached == 0
    torch.testing.assert_close(cold, reference, atol=1e-4, rtol=0)
    runner.prompt_logits("t", _tokens(rng, 100))   # pushes `prompt`'s blocks down to the host tier
    logits, cached = runner.prompt_logits("t", prompt)
    assert cached == 64
    torch.testing.assert_close(logits, reference[cached:], atol=1e-4, rtol=0)
    params = SamplingParams(max_tokens=10, temperature=0.0, ignore_eos=True)
    outputs = []
    for each in (_runner(tiny_loaded), runner):
        seq, _ = each.start(WorkItem("g", "t", prompt[:37], params), tiny_loaded.tokenizer)
        each.commit_prompt(seq)
        for _ in range(params.max_tokens - 1):
            each.step(seq)
        each.finish(seq)
        outputs.append(seq.output_ids)
    assert outputs[0] == outputs[1] and len(outputs[0]) == 10


def test_ids_past_the_tokenizer_are_never_sampled_nor_scored(tiny_loaded):
    """The tiny model's output layer is padded past its tokenizer: a bias of -100 on every
    real token but one leaves that one, never a padding id (which decodes to nothing)."""
    num_tokens = len(tiny_loaded.tokenizer)
    assert tiny_loaded.model.config.vocab_size > num_tokens   # the case under test
    runner = _runner(tiny_loaded)
    bias = tuple((token, -100.0) for token in range(num_tokens) if token != 70)
    for seed in range(4):
        params = SamplingParams(max_tokens=4, temperature=1.0, seed=seed, ignore_eos=True, logit_bias=bias,
                                logprobs=5)
        seq, _ = runner.start(WorkItem(f"r{seed}", "t", _tokens(random.Random(seed), 20), params),
                              tiny_loaded.tokenizer)
        runner.commit_prompt(seq)
        for _ in range(params.max_tokens - 1):
            runner.step(seq)
        runner.finish(seq)
        assert seq.output_ids == [70] * params.max_tokens
        assert seq.output_logprobs and all(token < num_tokens for scored in seq.output_logprobs
                                           for token, _ in scored.top)
