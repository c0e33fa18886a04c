"""Decoding many running requests in one forward pass, each over its own KV cache.

On a CPU (and for small models on a GPU) a decode step is bound by reading the weights,
not by arithmetic: one forward for eight sequences costs about what one costs for one.
Padding the sequences' caches into one batch tensor would copy every cache whenever a
request joins or leaves, so instead the batch shares everything but attention: the
projections, MLPs and the LM head run once over all rows, and each row attends to its
own cache (`RowCaches.update` appends row i's new key/value to request i's cache and
hands the attention function the per-row tensors, `RowKV`).

The attention function is registered with transformers under `ROW_ATTENTION`. For any
other input (prefill, a single decode) it computes transformers' SDPA attention with
SDPA's masks (`gqa_attention`: on a CPU the grouped-query heads go to SDPA without
transformers' per-head copies; equal up to float rounding, tested), so switching a
model to it changes no result outside batched decode.

A prefill chunk can carry running requests' decodes along (`prefill_chunk_with_decodes`):
the chunk and one token per request are packed into one sequence (`SegmentCaches`,
`SegmentKV`), each segment attending causally to its own cache, so the decodes ride on
the chunk's pass over the weights instead of waiting for the prefill to end.

Invariant (tested): a row's logits equal a one-sequence decode of the same request up to
float rounding of the batched matrix products, and its cache grows by exactly one token;
a packed chunk's logits equal the chunk's own pass.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import AttentionInterface, DynamicCache
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

ROW_ATTENTION = "stepahead_rows"


class RowKV(list):
    """Per-row key (or value) tensors of a batch, each `[1, kv_heads, len_i, head_dim]`."""


class SegmentKV(list):
    """Per-segment key (or value) tensors of one packed sequence, each `[1, kv_heads,
    len_i, head_dim]`; segment i holds the last `query_lengths[i]` queries' tokens."""

    def __init__(self, tensors, query_lengths: Sequence[int]):
        super().__init__(tensors)
        self.query_lengths = tuple(query_lengths)


def row_attention(module, query, key, value, attention_mask, **kwargs):
    """SDPA attention; for `RowKV` keys, each row's single query over its own cache; for
    `SegmentKV` keys, each segment's queries over its own cache, causally. All of it
    through `gqa_attention`."""
    if isinstance(key, SegmentKV):
        outputs, start = [], 0
        for seg_key, seg_value, length in zip(key, value, key.query_lengths):
            mask = None
            if length > 1:  # query j sits at cache position total - length + j
                total = seg_key.shape[-2]
                mask = (torch.arange(total, device=query.device)[None, :]
                        <= torch.arange(total - length, total, device=query.device)[:, None])[None, None]
            outputs.append(gqa_attention(module, query[:, :, start:start + length], seg_key, seg_value, mask, **kwargs))
            start += length
        return torch.cat(outputs, dim=1), None
    if isinstance(key, RowKV):
        outputs = [gqa_attention(module, query[i:i + 1], row_key, row_value, None, **kwargs)
                   for i, (row_key, row_value) in enumerate(zip(key, value))]
        return torch.cat(outputs, dim=0), None
    return gqa_attention(module, query, key, value, attention_mask, **kwargs), None


def gqa_attention(module, query, key, value, attention_mask, **kwargs) -> torch.Tensor:
    """transformers' SDPA attention (`[batch, queries, heads, head_dim]`, as its
    attention functions return it), faster on a CPU for grouped-query models.

    transformers hands SDPA grouped heads with `enable_gqa` only when there is no mask,
    and otherwise copies every key/value head once per query head it serves
    (`repeat_kv`), which is what a prefill after a cached prefix pays. On a CPU:
    - a lone query token (a decode; no mask) goes to SDPA with the query heads that share
      a key/value head as that head's queries, so each cache is read once per key/value
      head (transformers' `enable_gqa` path takes 1.3x to 2x as long);
    - queries with a mask go to SDPA with `enable_gqa` and the mask, no copies.
    Elsewhere (a GPU's kernels), without grouped heads, for causal queries without a
    mask and for anything beyond plain scaled attention (softcapping, position biases)
    this is transformers' function unchanged.
    """
    batch, num_heads, num_queries, head_dim = query.shape
    num_kv_heads = key.shape[1]
    if (query.device.type != "cpu" or num_heads == num_kv_heads or num_heads % num_kv_heads
            or (attention_mask is None and num_queries > 1)
            or kwargs.get("softcap") is not None or kwargs.get("position_bias") is not None):
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)[0]
    scale = kwargs.get("scaling")
    if attention_mask is None:  # one query
        grouped = query.reshape(batch, num_kv_heads, num_heads // num_kv_heads, head_dim)
        out = torch.nn.functional.scaled_dot_product_attention(grouped, key, value, scale=scale)
        return out.reshape(batch, num_heads, 1, head_dim).transpose(1, 2)
    out = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, scale=scale,
                                                           enable_gqa=True)
    return out.transpose(1, 2)


class RowCaches:
    """The cache object of a batched decode: routes row i of each layer's new key/value
    to `caches[i]` (only `update` is used by the attention layers)."""

    def __init__(self, caches: Sequence[DynamicCache]):
        self.caches = caches

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        keys, values = RowKV(), RowKV()
        for i, cache in enumerate(self.caches):
            row_key, row_value = cache.layers[layer_idx].update(key_states[i:i + 1], value_states[i:i + 1])
            keys.append(row_key)
            values.append(row_value)
        return keys, values


class SegmentCaches:
    """The cache object of a packed pass: segment i of the sequence dimension (its
    `query_lengths[i]` tokens) is appended to `caches[i]`."""

    def __init__(self, caches: Sequence[DynamicCache], query_lengths: Sequence[int]):
        self.caches = caches
        self.query_lengths = query_lengths

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        keys, values, start = [], [], 0
        for cache, length in zip(self.caches, self.query_lengths):
            seg_key, seg_value = cache.layers[layer_idx].update(key_states[:, :, start:start + length],
                                                                value_states[:, :, start:start + length])
            keys.append(seg_key)
            values.append(seg_value)
            start += length
        return SegmentKV(keys, self.query_lengths), SegmentKV(values, self.query_lengths)


def enable_row_batching(model) -> bool:
    """Switch `model` to the row attention if it runs on SDPA; True when it did (or had).

    The registration with transformers is by name and idempotent. Models on another
    attention implementation (eager, flash), and models with sliding-window layers (a row
    attends to its whole cache, unmasked), are left alone and decode one at a time.
    """
    if getattr(model.config, "_attn_implementation", None) == ROW_ATTENTION:
        return True
    if getattr(model.config, "_attn_implementation", None) != "sdpa":
        return False
    if getattr(model.config, "sliding_window", None) or "sliding_attention" in (
            getattr(model.config, "layer_types", None) or ()):
        return False
    AttentionInterface.register(ROW_ATTENTION, row_attention)
    AttentionMaskInterface.register(ROW_ATTENTION, sdpa_mask)
    try:
        model.set_attn_implementation(ROW_ATTENTION)
    except (ValueError, AttributeError):
        return False
    return model.config._attn_implementation == ROW_ATTENTION


def truncate_cache(cache: DynamicCache, num_tokens: int) -> None:
    """Drop every layer's entries past `num_tokens` (undo a partial forward)."""
    for layer in cache.layers:
        if getattr(layer, "keys", None) is not None and layer.keys.dim() == 4 and layer.keys.shape[-2] > num_tokens:
            layer.keys = layer.keys[:, :, :num_tokens]
            layer.values = layer.values[:, :, :num_tokens]


@torch.inference_mode()
def decode_rows(model, last_tokens: Sequence[int], caches: Sequence[DynamicCache],
                device: torch.device) -> torch.Tensor:
    """One decode step for each row: logits `[rows, vocab]` of the token after
    `last_tokens[i]`, whose KV is appended to `caches[i]`. On an error every cache is
    put back to its length before the call, so the step can be retried."""
    lengths = [cache.get_seq_length() for cache in caches]
    ids = torch.tensor([[token] for token in last_tokens], dtype=torch.long, device=device)
    positions = torch.tensor([[length] for length in lengths], dtype=torch.long, device=device)
    # a ready 4D mask makes transformers skip building one; the row attention needs none
    no_mask = torch.ones(len(caches), 1, 1, 1, dtype=torch.bool, device=device)
    return _forward_restoring(model, caches, lengths, input_ids=ids, cache=RowCaches(caches),
                              position_ids=positions, attention_mask=no_mask, logits_to_keep=1)[:, -1]


@torch.inference_mode()
def prefill_chunk_with_decodes(model, chunk: Sequence[int], chunk_cache: DynamicCache,
                               last_tokens: Sequence[int], caches: Sequence[DynamicCache],
                               device: torch.device) -> torch.Tensor:
    """One pass over a prefill chunk (appended to `chunk_cache`, which holds the tokens
    before it) and one decode step for each of `caches`, packed into one sequence:
    logits `[1 + rows, vocab]`, the chunk's last token's first, then each row's. On an
    error every cache is put back to its length before the call."""
    lengths = [cache.get_seq_length() for cache in (chunk_cache, *caches)]
    start = lengths[0]
    ids = torch.tensor([[*chunk, *last_tokens]], dtype=torch.long, device=device)
    positions = torch.tensor([[*range(start, start + len(chunk)), *lengths[1:]]], dtype=torch.long, device=device)
    keep = torch.arange(len(chunk) - 1, len(chunk) + len(caches), device=device)
    no_mask = torch.ones(1, 1, ids.shape[1], 1, dtype=torch.bool, device=device)
    all_caches = [chunk_cache, *caches]
    return _forward_restoring(model, all_caches, lengths,
                              input_ids=ids, cache=SegmentCaches(all_caches, [len(chunk)] + [1] * len(caches)),
                              position_ids=positions, attention_mask=no_mask, logits_to_keep=keep)[0]


def _forward_restoring(model, caches: Sequence[DynamicCache], lengths: Sequence[int], **inputs) -> torch.Tensor:
    """The model's logits for `inputs`; if the pass fails, every cache is first cut back
    to its length before it (`lengths`), so the step can be retried."""
    try:
        return model(use_cache=True, **inputs).logits
    except BaseException:
        for cache, length in zip(caches, lengths):
            truncate_cache(cache, length)
        raise
