from __future__ import annotations

import math
import random

import pytest
import torch

from shards.protocol import SamplingParams
from shards.sampling import (OutputPenalties, adjusted_logits, draw_index, make_generator, nucleus, sample_next,
                             token_logprob)


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
    params = SamplingParams(temperature=1.0, top_p=0.0, seed=1)   # the smallest set: one token
    generator = make_generator(params)
    assert {sample_next(logits, params, generator) for _ in range(50)} == {0}


def test_draw_index_draws_in_proportion_to_the_weights():
    """Known answer: 40,000 draws from weights 5:3:2:0 land within 1.5 points of 50, 30
    and 20 %, never on the zero weight; a seeded generator repeats its draws."""
    weights = torch.tensor([5.0, 3.0, 2.0, 0.0])
    generator = torch.Generator().manual_seed(11)
    draws = [draw_index(weights, generator) for _ in range(40_000)]
    shares = [draws.count(i) / len(draws) for i in range(4)]
    assert all(abs(got - want) < 0.015 for got, want in zip(shares, [0.5, 0.3, 0.2]))
    assert shares[3] == 0.0
    again = torch.Generator().manual_seed(11)
    assert [draw_index(weights, again) for _ in range(100)] == draws[:100]


@pytest.mark.parametrize("top_p", [0.1, 0.7, 0.999])   # kept: 44, 502, 2,876 tokens
def test_nucleus_is_the_smallest_likeliest_set_reaching_top_p(top_p):
    """Against the whole sort: the same tokens kept with the same probabilities, whether
    the set lies within the top 64 tokens, the top 1,024, or only the whole vocabulary."""
    probs = torch.softmax(torch.linspace(12.0, 0.0, 5000)[torch.randperm(5000, generator=torch.Generator().manual_seed(4))],
                          dim=-1)
    weights, ids = nucleus(probs, top_p)
    ordered, order = torch.sort(probs, descending=True)
    num_kept = int(((torch.cumsum(ordered, dim=-1) - ordered) < top_p).sum())
    kept = weights > 0
    assert int(kept.sum()) == num_kept
    assert ids[kept].tolist() == order[:num_kept].tolist()
    assert torch.equal(weights[kept], ordered[:num_kept])
    assert float(ordered[:num_kept].sum()) >= top_p > float(ordered[:num_kept - 1].sum())


def test_token_logprob_is_the_logits_own_log_softmax_with_the_likeliest_first():
    logits = torch.log(torch.tensor([0.1, 0.6, 0.3]))  # already normalised probabilities
    scored = token_logprob(logits, 2, num_top=2)
    assert scored.token_id == 2 and math.isclose(scored.logprob, math.log(0.3), rel_tol=1e-5)
    assert [token for token, _ in scored.top] == [1, 2]
    assert math.isclose(scored.top[0][1], math.log(0.6), rel_tol=1e-5)
    shifted = token_logprob(logits + 3, 1, 0)  # logits are free up to a constant
    assert shifted.top == () and math.isclose(shifted.logprob, math.log(0.6), rel_tol=1e-5)
    assert len(token_logprob(logits, 0, num_top=20).top) == 3  # never more than the vocabulary


def test_adjusted_logits_apply_openai_penalties_and_bias():
    logits = torch.zeros(5)
    params = SamplingParams(presence_penalty=0.5, frequency_penalty=1.0, logit_bias=((4, 10.0), (99, 5.0)))
    adjusted = adjusted_logits(logits, params, [1, 1, 3])
    assert adjusted.tolist() == [0.0, -2.5, 0.0, -1.5, 10.0]  # id 99 is past the vocabulary: ignored
    assert logits.tolist() == [0.0] * 5  # the model's logits are left as they were
    assert adjusted_logits(logits, SamplingParams(), [1, 2]) is logits  # nothing set: no copy
    banned = SamplingParams(temperature=0.0, logit_bias=((1, -100.0),))
    assert sample_next(adjusted_logits(torch.tensor([0.1, 3.0, 2.0]), banned, []), banned, None) == 2


def test_output_penalties_kept_a_token_at_a_time_equal_those_counted_anew():
    """Invariant: the sequence's penalties, grown by one token, or by many at once (a
    resumed request's sent output), are those of the output counted anew."""
    rng = random.Random(3)
    output = [rng.randrange(50) for _ in range(40)]   # a resumed request's sent tokens
    kept = OutputPenalties()
    params = SamplingParams(presence_penalty=0.3, frequency_penalty=0.7)
    logits = torch.randn(64, generator=torch.Generator().manual_seed(1))
    for _ in range(200):
        counted = torch.tensor([float(output.count(i)) for i in range(64)])
        expected = logits - (0.7 * counted + 0.3 * (counted > 0))
        assert torch.allclose(adjusted_logits(logits, params, output, kept), expected, atol=1e-5)
        output.append(rng.randrange(64))
    assert kept.counts == {i: output[:-1].count(i) for i in set(output[:-1])}
    assert kept.num_counted == len(output) - 1


def test_seed_for_position_is_splitmix64_of_the_seed_and_the_position():
    from shards.sampling import seed_for_position

    assert seed_for_position(0, 0) == 0xE220A8397B1DCDAF   # splitmix64's first output from state 0
    seeds = [seed_for_position(42, position) for position in range(1000)]
    assert len(set(seeds)) == 1000 and all(0 <= v < 2 ** 64 for v in seeds)
    assert seed_for_position(43, 0) != seeds[0]


def test_a_work_item_that_samples_without_a_seed_is_given_the_one_offered():
    from shards.protocol import WorkItem

    sampled = WorkItem("r", "t", [1, 2], SamplingParams(temperature=0.8))
    assert sampled.seeded(12345).sampling.seed == 12345 and sampled.sampling.seed is None
    seeded = WorkItem("r", "t", [1, 2], SamplingParams(temperature=0.8, seed=7))
    greedy = WorkItem("r", "t", [1, 2], SamplingParams(temperature=0.0))
    assert seeded.seeded(12345) is seeded and greedy.seeded(12345) is greedy


@pytest.mark.parametrize("temperature", [1e-300, 1e-40, 1e-6])
def test_a_near_zero_temperature_samples_the_likeliest_token(temperature):
    """Known answer: OpenAI accepts any temperature in [0, 2]; one this small is greedy
    (in float32 it overflowed to NaN probabilities, and the draw was the vocabulary
    size), with a finite log probability when asked."""
    logits = torch.tensor([0.1, 3.0, 2.0, -1.0])
    for top_p in (1.0, 0.9):
        params = SamplingParams(temperature=temperature, top_p=top_p, seed=3)
        assert [sample_next(logits, params, make_generator(params)) for _ in range(20)] == [1] * 20
    scored = token_logprob(logits, sample_next(logits, SamplingParams(temperature=temperature), None), num_top=2)
    assert scored.token_id == 1 and math.isclose(scored.logprob, float(torch.log_softmax(logits, -1)[1]))
    assert [token for token, _ in scored.top] == [1, 2] and all(math.isfinite(v) for _, v in scored.top)


def test_sample_next_gives_an_id_of_the_row_for_extreme_logits_and_temperatures():
    """Invariant: whatever the logits (huge, -inf, +inf, NaN) and temperature in (0, 2],
    the id is one of the row's: the one whose logit is far above the others', one of the
    +inf ones, never a -inf one while another is possible."""
    inf, nan = math.inf, math.nan
    any_id = {0, 1, 2, 3}
    rows = [([1e30, -1e30, -inf, 5.0], {0}), ([-inf, 3e38, -3e38, 0.0], {1}), ([-1e30, -1e30, -inf, 1e30], {3}),
            ([inf, 0.0, inf, -inf], {0, 2}), ([nan, 1.0, 2.0, -inf], any_id), ([-inf] * 4, any_id), ([0.0] * 4, any_id)]
    for row, allowed in rows:
        logits = torch.tensor(row)
        for temperature in (5e-324, 1e-300, 1e-40, 1e-6, 1e-5, 1e-3, 0.7, 1.0, 2.0):
            for top_p in (1.0, 0.5, 0.0):
                params = SamplingParams(temperature=temperature, top_p=top_p, seed=1)
                generator = make_generator(params)
                drawn = {sample_next(logits, params, generator) for _ in range(30)}
                assert drawn <= allowed, (row, temperature, top_p, drawn)


def test_draw_index_stays_in_range_with_nan_weights():
    for weights in ([math.nan] * 3, [1.0, math.nan, 3.0], [0.0, 0.0, math.nan], [0.0, 0.0, 0.0]):
        for seed in range(20):
            assert 0 <= draw_index(torch.tensor(weights), torch.Generator().manual_seed(seed)) < 3, weights


@pytest.mark.parametrize("temperature", [1e-4, 0.3, 0.7, 1.0, 1.7])
def test_ordinary_temperatures_draw_as_the_unshifted_softmax(temperature):
    """Shifting the logits to a maximum of 0 before tempering changes no draw: a seeded
    request's tokens stay what they were."""
    logits = torch.randn(500, generator=torch.Generator().manual_seed(8)) * 4
    params = SamplingParams(temperature=temperature, seed=5)
    ours, theirs = make_generator(params), make_generator(params)
    unshifted = torch.softmax(logits / temperature, dim=-1)
    drawn = [sample_next(logits, params, ours) for _ in range(300)]
    assert drawn == [draw_index(unshifted, theirs) for _ in range(300)]
