"""The KV cache's layout and memory for a loaded model, or a one-line reason it cannot be had.

Invariant: what the engine cannot give a model (a config without attention heads as
Llama's names them, an arena larger than memory) is a ModelLoadError saying what to do,
which the worker reports in one line, never torch's or transformers' traceback.
"""
from __future__ import annotations

from pathlib import Path

import torch

from cache.kv_arena import KVArena, KVLayout
from shards.model_files import ModelLoadError, unservable_model


def kv_layout(model: torch.nn.Module, model_id: str, block_size: int, dtype: torch.dtype) -> KVLayout:
    """The layout of `model`'s KV blocks."""
    try:
        return KVLayout.for_model_config(model.config, block_size, dtype)
    except AttributeError as exc:   # a config without attention heads as Llama's names them (GPT-2's)
        raise unservable_model(Path(model_id), f"{type(model).__name__} ({exc})") from None


# torch sizes a tensor's storage in a signed 64-bit byte count: past it, "Storage size
# calculation overflowed" (a typo's 2**62 blocks), not an allocation that fails for memory
MAX_TENSOR_BYTES = 2**63 - 1


def kv_arena(layout: KVLayout, num_blocks: int, tier: str, **where) -> KVArena:
    """A tier's KV arena; ModelLoadError saying what to lower when torch cannot allocate it
    (out of memory, or a size past what torch can count, checked before it tries)."""
    if num_blocks * layout.bytes_per_block > MAX_TENSOR_BYTES:
        raise _too_large(layout, num_blocks, tier)
    try:
        return KVArena(layout, num_blocks, **where)
    except (RuntimeError, MemoryError) as exc:   # torch: "can't allocate memory", "out of memory", "overflowed"
        if not any(word in str(exc) for word in ("memory", "overflow")) and not isinstance(exc, MemoryError):
            raise
        raise _too_large(layout, num_blocks, tier) from None


def _too_large(layout: KVLayout, num_blocks: int, tier: str) -> ModelLoadError:
    gib = num_blocks * layout.bytes_per_block / 2**30
    return ModelLoadError(f"the KV cache's {tier} tier of {num_blocks:,} blocks ({gib:,.1f} GiB) cannot be "
                          f"allocated: lower num_{tier}_blocks (--{tier}-blocks)")
