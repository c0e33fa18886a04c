"""A request's `FinishEvent.num_cache_write_tokens`: the full blocks of its prompt that
its worker registered in the prefix cache as new (tiny model, block size 16)."""
from __future__ import annotations

import random

from shards.model_runner import ModelRunner
from shards.protocol import FinishEvent, SamplingParams, WorkItem
from shards.worker import WorkerConfig, WorkerLoop

BLOCK = 16


def _loop(tiny_loaded, prefix_caching=True, num_hot_blocks=64):
    runner = ModelRunner(tiny_loaded, num_hot_blocks=num_hot_blocks, block_size=BLOCK, prefix_caching=prefix_caching)
    out: list = []
    return WorkerLoop("w0", WorkerConfig(model="tiny", block_size=BLOCK), runner, tiny_loaded.tokenizer,
                      out.append), out


def _finish(loop, out, request_id, prompt, max_tokens=3) -> FinishEvent:
    loop.handle(WorkItem(request_id, "t", list(prompt), SamplingParams(max_tokens=max_tokens, temperature=0.0,
                                                                      ignore_eos=True)))
    for _ in range(200):
        if not loop.has_work():
            break
        loop.step()
    (finish,) = [m for m in out if isinstance(m, FinishEvent) and m.request_id == request_id]
    return finish


def _prompt(num_tokens, seed=0):
    rng = random.Random(seed)
    return [rng.randrange(250) for _ in range(num_tokens)]


def test_a_prompt_writes_its_new_full_blocks_once_and_its_repeat_writes_none(tiny_loaded):
    loop, out = _loop(tiny_loaded)
    prompt = _prompt(40)
    first = _finish(loop, out, "r1", prompt)
    assert (first.num_cached_tokens, first.num_cache_write_tokens) == (0, 32)   # 2 full blocks; 8 tokens not kept
    again = _finish(loop, out, "r2", prompt)
    assert (again.num_cached_tokens, again.num_cache_write_tokens) == (32, 0)
    longer = _finish(loop, out, "r3", prompt + _prompt(30, seed=1))   # 70 tokens: blocks 3 and 4 are new
    assert (longer.num_cached_tokens, longer.num_cache_write_tokens) == (32, 32)


def test_a_request_ending_at_its_first_token_counts_its_prompt_writes(tiny_loaded):
    loop, out = _loop(tiny_loaded)
    finish = _finish(loop, out, "one", _prompt(48, seed=2), max_tokens=1)
    assert finish.num_output_tokens == 1
    assert finish.num_cache_write_tokens == 48   # 3 full prompt blocks; the output's block is not the prompt's


def test_without_prefix_caching_nothing_is_written(tiny_loaded):
    loop, out = _loop(tiny_loaded, prefix_caching=False)
    prompt = _prompt(40)
    assert [_finish(loop, out, rid, prompt).num_cache_write_tokens for rid in ("a", "b")] == [0, 0]


def test_a_hot_tier_too_small_for_the_prompt_counts_only_the_blocks_it_kept(tiny_loaded):
    loop, out = _loop(tiny_loaded, num_hot_blocks=4)
    finish = _finish(loop, out, "big", _prompt(100, seed=3), max_tokens=1)   # 6 full blocks, room for 4
    assert finish.num_cache_write_tokens == 4 * BLOCK
