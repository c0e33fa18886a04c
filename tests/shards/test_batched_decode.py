"""Batched decode: each row's logits and tokens match a one-at-a-time decode of the same
request, caches grow by one token per row, and a failed pass leaves every cache intact."""
from __future__ import annotations

import random

import pytest
import torch

from shards.batched_decode import (ROW_ATTENTION, decode_rows, enable_row_batching, gqa_attention,
                                  prefill_chunk_with_decodes)
from shards.model_loader import load_model
from shards.model_runner import ModelRunner
from shards.protocol import SamplingParams, WorkItem

BLOCK = 16


def _runner(loaded, num_hot_blocks=64):
    return ModelRunner(loaded, num_hot_blocks=num_hot_blocks, block_size=BLOCK)


def _prompts(seed, lengths, vocab=250):
    rng = random.Random(seed)
    return [[rng.randrange(vocab) for _ in range(n)] for n in lengths]


def _start_all(runner, loaded, prompts, params):
    seqs = []
    for i, prompt in enumerate(prompts):
        seq, _ = runner.start(WorkItem(f"r{i}", "t", prompt, params), loaded.tokenizer)
        runner.commit_prompt(seq)
        seqs.append(seq)
    return seqs


@pytest.mark.parametrize("params", [
    SamplingParams(max_tokens=10, temperature=0.0, ignore_eos=True),
    SamplingParams(max_tokens=10, temperature=0.9, top_p=0.9, seed=5, ignore_eos=True),
], ids=["greedy", "seeded"])
def test_step_many_makes_the_tokens_of_one_at_a_time(tiny_loaded, params):
    prompts = _prompts(1, [5, 40, 97, 130])
    batched = _runner(tiny_loaded)
    assert batched.batches_decode and tiny_loaded.model.config._attn_implementation == ROW_ATTENTION
    seqs = _start_all(batched, tiny_loaded, prompts, params)
    for _ in range(params.max_tokens - 1):
        batched.step_many(seqs)
    single = _runner(tiny_loaded)
    for prompt, seq in zip(prompts, seqs):
        (alone,) = _start_all(single, tiny_loaded, [prompt], params)
        for _ in range(params.max_tokens - 1):
            single.step(alone)
        assert alone.output_ids == seq.output_ids
        assert seq.num_kv_tokens == len(prompt) + params.max_tokens - 1


def test_decode_rows_logits_equal_single_decodes_with_reused_prefixes(tiny_loaded):
    """Rows whose prefixes came from the arena (zero-copy views) and rows of fresh
    prompts, of different lengths, in one pass."""
    runner = _runner(tiny_loaded)
    shared = _prompts(2, [48])[0]
    prompts = [shared + tail for tail in _prompts(3, [7, 20])] + _prompts(4, [3, 66])
    params = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)
    _start_all(runner, tiny_loaded, [shared], params)  # puts the shared blocks in the arena
    seqs = _start_all(runner, tiny_loaded, prompts, params)
    assert [seq.num_cached_tokens for seq in seqs] == [48, 48, 0, 0]
    lengths = [seq.num_kv_tokens for seq in seqs]
    expected = []
    for seq in seqs:
        logits, _ = runner.forward([seq.output_ids[-1]], _copy(seq.cache, tiny_loaded), seq.num_kv_tokens)
        expected.append(logits[0, -1])
    rows = decode_rows(tiny_loaded.model, [seq.output_ids[-1] for seq in seqs],
                       [seq.cache for seq in seqs], runner.device)
    # the runner's logits leave out the padded rows past the tokenizer's ids
    torch.testing.assert_close(rows[:, :runner.num_token_ids], torch.stack(expected), atol=1e-5, rtol=0)
    assert [seq.num_kv_tokens for seq in seqs] == [n + 1 for n in lengths]


@pytest.mark.parametrize("num_heads,num_kv_heads", [(9, 3), (4, 2), (4, 4)])
def test_gqa_attention_equals_transformers_sdpa(num_heads, num_kv_heads):
    """Known answer: transformers' own SDPA attention, on a cache that is a view of a
    longer buffer (as `GrowableLayer` keeps it): lone queries without a mask, and
    queries after a cached prefix with their causal mask (bool, and additive)."""
    from types import SimpleNamespace

    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    gen = torch.Generator().manual_seed(0)
    module = SimpleNamespace(num_key_value_groups=num_heads // num_kv_heads, is_causal=True, training=False)
    for batch, num_queries, length in ((1, 1, 1), (1, 1, 300), (2, 1, 77), (1, 5, 5), (1, 24, 300), (2, 3, 40)):
        query = torch.randn(batch, num_heads, num_queries, 16, generator=gen)
        key = torch.randn(batch, num_kv_heads, length + 50, 16, generator=gen)[:, :, :length]
        value = torch.randn(batch, num_kv_heads, length + 50, 16, generator=gen)[:, :, :length]
        masks = [None]
        if num_queries > 1:
            causal = (torch.arange(length)[None, :] <= torch.arange(length - num_queries, length)[:, None])[None, None]
            masks = [causal, torch.zeros(causal.shape).masked_fill(~causal, torch.finfo(torch.float32).min)]
        for mask in masks:
            expected, _ = sdpa_attention_forward(module, query, key, value, mask, scaling=0.3, dropout=0.0)
            got = gqa_attention(module, query, key, value, mask, scaling=0.3, dropout=0.0)
            assert got.shape == expected.shape == (batch, num_queries, num_heads, 16)
            torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-5)


def test_row_attention_model_decodes_as_the_sdpa_model(tiny_loaded):
    """The whole model on the row attention gives the logits it gives on transformers'
    SDPA attention: a prefill, a prefill after that cached prefix, then decode steps."""
    runner = _runner(tiny_loaded)
    prompt = _prompts(9, [45])[0]
    tokens = _prompts(10, [4])[0]
    model = tiny_loaded.model

    def run():
        _, cache = runner.forward(prompt[:30], None, 0)
        logits, cache = runner.forward(prompt[30:], cache, 30, logits_to_keep=0)
        steps = [*logits[0]]
        for i, token in enumerate(tokens):
            logits, cache = runner.forward([token], cache, len(prompt) + i)
            steps.append(logits[0, -1])
        return torch.stack(steps)

    rows = run()
    try:
        model.set_attn_implementation("sdpa")
        reference = run()
    finally:
        assert enable_row_batching(model)
    torch.testing.assert_close(rows, reference, atol=1e-5, rtol=0)


def _copy(cache, loaded):
    from shards.kv_cache import make_cache

    return make_cache(loaded.model.config, [(layer.keys.clone(), layer.values.clone()) for layer in cache.layers])


@pytest.mark.parametrize("num_cached", [0, 20])
def test_chunk_with_decodes_equals_the_chunk_and_each_decode_alone(tiny_loaded, num_cached):
    """A 24-token chunk (after `num_cached` tokens already in its cache, or none) packed
    with three running rows of different lengths: the chunk's last logits and its cache
    are the chunk's own pass's, each row's logits its single decode's."""
    from shards.kv_cache import make_cache

    runner = _runner(tiny_loaded)
    params = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)
    seqs = _start_all(runner, tiny_loaded, _prompts(5, [9, 70, 33]), params)
    lengths = [seq.num_kv_tokens for seq in seqs]
    prompt = _prompts(6, [60])[0]
    end = num_cached + 24
    if num_cached:
        _, chunk_cache = runner.forward(prompt[:num_cached], None, 0)
    else:
        chunk_cache = make_cache(tiny_loaded.model.config)
    expected_chunk, _ = runner.forward(prompt[num_cached:end], _copy(chunk_cache, tiny_loaded) if num_cached else None,
                                       num_cached)
    expected_rows = [runner.forward([seq.output_ids[-1]], _copy(seq.cache, tiny_loaded), seq.num_kv_tokens)[0][0, -1]
                     for seq in seqs]
    logits = prefill_chunk_with_decodes(tiny_loaded.model, prompt[num_cached:end], chunk_cache,
                                        [seq.output_ids[-1] for seq in seqs], [seq.cache for seq in seqs],
                                        runner.device)
    logits = logits[:, :runner.num_token_ids]   # as the runner's, without the padded rows
    torch.testing.assert_close(logits[0], expected_chunk[0, -1], atol=1e-5, rtol=0)
    torch.testing.assert_close(logits[1:], torch.stack(expected_rows), atol=1e-5, rtol=0)
    assert chunk_cache.get_seq_length() == end
    assert [seq.num_kv_tokens for seq in seqs] == [n + 1 for n in lengths]
    whole, _ = runner.forward(prompt[:end + 1], None, 0)  # the packed chunk's KV serves what follows
    after, _ = runner.forward([prompt[end]], chunk_cache, end)
    torch.testing.assert_close(after[0, -1], whole[0, -1], atol=1e-5, rtol=0)


def test_failed_chunk_with_decodes_restores_every_cache(tiny_loaded, monkeypatch):
    runner = _runner(tiny_loaded)
    params = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)
    seqs = _start_all(runner, tiny_loaded, _prompts(5, [9, 33]), params)
    _, chunk_cache = runner.forward(_prompts(7, [40])[0], None, 0)
    caches = [chunk_cache, *(seq.cache for seq in seqs)]
    lengths = [[layer.keys.shape[-2] for layer in cache.layers] for cache in caches]
    monkeypatch.setattr(tiny_loaded.model.model.layers[-1].mlp, "forward",
                        lambda *a, **k: (_ for _ in ()).throw(RuntimeError("out of memory")))
    with pytest.raises(RuntimeError):
        prefill_chunk_with_decodes(tiny_loaded.model, _prompts(8, [16])[0], chunk_cache,
                                   [seq.output_ids[-1] for seq in seqs], [seq.cache for seq in seqs], runner.device)
    assert [[layer.keys.shape[-2] for layer in cache.layers] for cache in caches] == lengths


def test_failed_pass_restores_every_cache(tiny_loaded, monkeypatch):
    runner = _runner(tiny_loaded)
    params = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)
    seqs = _start_all(runner, tiny_loaded, _prompts(5, [9, 33, 70]), params)
    lengths = [[layer.keys.shape[-2] for layer in seq.cache.layers] for seq in seqs]
    last_layer = tiny_loaded.model.model.layers[-1]

    def broken(*args, **kwargs):
        raise RuntimeError("out of memory")

    monkeypatch.setattr(last_layer.mlp, "forward", broken)  # fails after layer 0 stored its keys
    with pytest.raises(RuntimeError):
        runner.step_many(seqs)
    assert [[layer.keys.shape[-2] for layer in seq.cache.layers] for seq in seqs] == lengths
    monkeypatch.undo()
    tokens = runner.step_many(seqs)  # the same step again now gives what a clean run gives
    reference = _runner(tiny_loaded)
    again = _start_all(reference, tiny_loaded, _prompts(5, [9, 33, 70]), params)
    assert tokens == reference.step_many(again)


def test_sliding_window_models_are_not_row_batched():
    loaded = load_model("tiny")
    loaded.model.config.sliding_window = 64
    assert not enable_row_batching(loaded.model)
    assert loaded.model.config._attn_implementation == "sdpa"


def test_models_not_on_sdpa_decode_one_at_a_time():
    loaded = load_model("tiny")
    loaded.model.set_attn_implementation("eager")
    assert not enable_row_batching(loaded.model)
    runner = _runner(loaded)
    assert not runner.batches_decode
    params = SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True)
    seqs = _start_all(runner, loaded, _prompts(6, [12, 30]), params)
    tokens = runner.step_many(seqs)
    assert tokens == [seq.output_ids[-1] for seq in seqs]
    assert loaded.model.config._attn_implementation == "eager"
