"""Decoding many running requests in one forward pass, each over its own KV cache.

On a CPU (and for small models on a GPU) a decode step is bound by reading the weights,
not by arithmetic: one forward for eight sequences costs about what one costs for one.
Padding the sequences' caches into one batch tensor would copy every cache whenever a
request joins or leaves, so instead the batch shares everything but attention: the
projections, MLPs and the LM head run once over all rows, and each row attends to its
own cache (`RowCaches.update` appends row i's new key/value to request i's cache and
hands the attention function the per-row tensors, `RowKV`).

The attention function is registered with transformers under `ROW_ATTENTION`. For any
other input (prefill, a single decode) it is exactly transformers' SDPA attention, with
SDPA's masks, so switching a model to it changes nothing outside batched decode.

Invariant (tested): a row's logits equal a one-sequence decode of the same request up to
float rounding of the batched matrix products, and its cache grows by exactly one token.
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


def row_attention(module, query, key, value, attention_mask, **kwargs):
    """SDPA attention; for `RowKV` keys, each row's single query over its own cache."""
    if not isinstance(key, RowKV):
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    outputs = [sdpa_attention_forward(module, query[i:i + 1], row_key, row_value, None, **kwargs)[0]
               for i, (row_key, row_value) in enumerate(zip(key, value))]
    return torch.cat(outputs, dim=0), None


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
    try:
        out = model(input_ids=ids, cache=RowCaches(caches), position_ids=positions,
                    attention_mask=no_mask, use_cache=True, logits_to_keep=1)
    except BaseException:
        for cache, length in zip(caches, lengths):
            truncate_cache(cache, length)
        raise
    return out.logits[:, -1]
