from __future__ import annotations

import torch

from shards.protocol import SamplingParams
from shards.sampling import make_generator, sample_next


def test_sample_next_greedy_is_argmax():
    logits = torch.tensor([0.1, 3.0, 2.0])
    assert sample_next(logits, SamplingParams(temperature=0.0), None) == 1


def test_sample_next_seed_repeats():
    logits = torch.randn(50, generator=torch.Generator().manual_seed(0))
    params = SamplingParams(temperature=1.0, seed=42)
    a = [sample_next(logits, params, g) for g in [make_generator(params)] for _ in range(20)]
    b = [sample_next(logits, params, g) for g in [make_generator(params)] for _ in range(20)]
    assert a == b


def test_sample_next_top_p_keeps_only_the_nucleus():
    logits = torch.log(torch.tensor([0.6, 0.3, 0.05, 0.05]))
    params = SamplingParams(temperature=1.0, top_p=0.5, seed=1)
    generator = make_generator(params)
    assert {sample_next(logits, params, generator) for _ in range(200)} == {0}
    params = SamplingParams(temperature=1.0, top_p=0.8, seed=1)
    generator = make_generator(params)
    assert {sample_next(logits, params, generator) for _ in range(300)} == {0, 1}
