"""Choosing the next token from logits: OpenAI's penalties and logit bias, then greedy,
temperature, nucleus (top_p), seeded; and, when asked, its log probability with the
likeliest alternatives."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from shards.protocol import SamplingParams, TokenLogprob


MASK_64 = 0xFFFF_FFFF_FFFF_FFFF


def seed_for_position(seed: int, position: int) -> int:
    """The RNG seed of a seeded request's output token at `position` (0 first): its
    `seed` and the position mixed (splitmix64's finalizer), so that a request resumed at
    any position on another worker (`WorkItem.resumed`) draws what it would have uncut."""
    z = (int(seed) + (position + 1) * 0x9E37_79B9_7F4A_7C15) & MASK_64
    z = ((z ^ (z >> 30)) * 0xBF58_476D_1CE4_E5B9) & MASK_64
    z = ((z ^ (z >> 27)) * 0x94D0_49BB_1331_11EB) & MASK_64
    return z ^ (z >> 31)


def make_generator(params: SamplingParams, device: torch.device | str = "cpu") -> torch.Generator | None:
    """A private RNG for one request when it asked for a seed (repeatable output), on
    the device the logits are sampled on; seeded again for each token
    (`seed_for_position`)."""
    if params.seed is None:
        return None
    generator = torch.Generator(device=device)
    generator.manual_seed(int(params.seed) & 0xFFFF_FFFF_FFFF_FFFF)
    return generator


@dataclass(slots=True)
class OutputPenalties:
    """A sequence's frequency and presence penalties, as a `[vocab]` float tensor kept up
    to date a token at a time: they are read at every token, and counting all the
    output's ids anew cost ~0.5 ms a token at 4,000 tokens here.
    Invariant: `penalty[i]` is `frequency_penalty × n + presence_penalty` for a token `i`
    that occurs `n > 0` times in the first `num_counted` output ids (those it was last
    given), else 0; `counts` holds those `n`."""

    penalty: torch.Tensor | None = None
    counts: dict[int, int] = field(default_factory=dict)
    num_counted: int = 0

    def of(self, output_ids: list[int], params: SamplingParams, vocab_size: int,
           device: torch.device) -> torch.Tensor:
        """The penalties of `output_ids` (the same list, grown since the last call; the
        same `params`)."""
        if self.penalty is None:
            self.penalty = torch.zeros(vocab_size, dtype=torch.float32, device=device)
        new = output_ids[self.num_counted:]
        if new:
            for token in new:
                self.counts[token] = self.counts.get(token, 0) + 1
            touched = sorted(set(new))
            values = [params.frequency_penalty * self.counts[t] + params.presence_penalty for t in touched]
            self.penalty[touched] = torch.tensor(values, dtype=torch.float32, device=device)
            self.num_counted = len(output_ids)
        return self.penalty


def adjusted_logits(logits: torch.Tensor, params: SamplingParams, output_ids: list[int],
                    penalties: OutputPenalties | None = None) -> torch.Tensor:
    """The `[vocab]` logits after OpenAI's penalties and bias: each token generated so far
    loses `presence_penalty` once and `frequency_penalty` per time; `logit_bias` adds to
    its tokens (ids past the vocabulary are ignored). The same tensor when none is set.
    `penalties`, the sequence's own, is kept up to date with `output_ids` (else they are
    counted anew)."""
    if not (params.presence_penalty or params.frequency_penalty or params.logit_bias):
        return logits
    if output_ids and (params.presence_penalty or params.frequency_penalty):
        table = (penalties or OutputPenalties()).of(output_ids, params, logits.shape[-1], logits.device)
        adjusted = logits.float() - table   # a new tensor: the model's logits stay as they were
    else:
        adjusted = logits.float().clone()
    biased = [(token, bias) for token, bias in params.logit_bias if 0 <= token < adjusted.shape[-1]]
    if biased:
        ids = torch.tensor([token for token, _ in biased], device=logits.device)
        adjusted[ids] += torch.tensor([bias for _, bias in biased], device=logits.device)
    return adjusted


# Temperatures below this sample as greedy, as vLLM's do (its `_SAMPLING_EPS`): OpenAI accepts
# any value in [0, 2], and one near zero (1e-300) tempers the likeliest token's weight to 1
# and every other to 0 at best, while in float32 it overflowed to NaN probabilities.
GREEDY_BELOW_TEMPERATURE = 1e-5


def sample_next(logits: torch.Tensor, params: SamplingParams,
                generator: torch.Generator | None) -> int:
    """Next token id, always within the `[vocab]` logits row. A temperature below
    `GREEDY_BELOW_TEMPERATURE` (0 included) is greedy; else a draw from the tempered
    softmax, within the nucleus when `top_p` < 1. The logits are shifted to a maximum of 0
    before tempering, so no finite logit overflows; +inf logits share the draw, and a NaN
    one (a broken model: no distribution) still gives an id of the row."""
    if params.temperature < GREEDY_BELOW_TEMPERATURE:
        return int(torch.argmax(logits).item())
    logits = logits.float()
    tempered = torch.nan_to_num((logits - logits.max()) / params.temperature, nan=0.0, neginf=-math.inf)
    probs = torch.softmax(tempered, dim=-1)
    if params.top_p < 1.0:
        weights, ids = nucleus(probs, params.top_p)
        return int(ids[draw_index(weights, generator)].item())
    return draw_index(probs, generator)


NUCLEUS_TRIES = (64, 1024)   # how many likeliest tokens are looked at for `top_p` before sorting all


def nucleus(probs: torch.Tensor, top_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The smallest set of likeliest tokens whose mass reaches `top_p` (always at least
    one): (the likeliest tokens' probabilities, zero past the set; their ids), likeliest
    first. A model's distribution mostly holds `top_p` in a few dozen tokens, so the top
    `NUCLEUS_TRIES` tokens are tried before sorting the whole vocabulary (4 ms here at
    49,152 tokens): when they hold `top_p`, the set is among them."""
    for k in NUCLEUS_TRIES:
        if k < probs.shape[-1]:
            top, ids = torch.topk(probs, k)
            if float(top.sum()) >= top_p:
                break
    else:
        top, ids = torch.sort(probs, descending=True)
    keep = (torch.cumsum(top, dim=-1) - top) < top_p
    keep[0] = True   # top_p 0: the likeliest token alone
    return torch.where(keep, top, torch.zeros_like(top)), ids


def draw_index(weights: torch.Tensor, generator: torch.Generator | None) -> int:
    """An index drawn with probability proportional to `weights` (not negative, not all
    zero): where one uniform draw falls in their cumulative sum; always below
    `len(weights)`, even when a weight is NaN. One random number, where
    `torch.multinomial` draws one per token (1.2 ms here at 49,152 tokens)."""
    cumulative = torch.cumsum(weights, dim=-1, dtype=torch.float64)
    point = torch.rand(1, generator=generator, dtype=torch.float64, device=weights.device) * cumulative[-1]
    index = int(torch.searchsorted(cumulative, point, right=True).item())
    if index == weights.shape[-1]:   # the draw rounded up to the total: the last token with weight
        index = int(torch.searchsorted(cumulative, cumulative[-1:]).item())
    if index == weights.shape[-1]:   # a NaN weight (no order to search): the heaviest of the others
        index = int(torch.argmax(torch.nan_to_num(weights, nan=-math.inf)).item())
    return index


def token_logprob(logits: torch.Tensor, token: int, num_top: int) -> TokenLogprob:
    """`token`'s log probability in the `[vocab]` logits' own distribution (OpenAI's and
    vLLM's default: before temperature and top_p) and the `num_top` likeliest tokens."""
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    top: tuple[tuple[int, float], ...] = ()
    if num_top > 0:
        values, ids = torch.topk(logprobs, min(num_top, logprobs.shape[-1]))
        top = tuple(zip(ids.tolist(), values.tolist()))
    return TokenLogprob(token, float(logprobs[token]), top)
