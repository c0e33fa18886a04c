"""A request's cached prefix as its model cache: the HOT blocks it holds, then the HOST
blocks the hot tier had no room to promote, read straight from the host arena.

`BlockManager.acquire_run` gives the run: HOT ids (the request keeps their references
until it ends) and HOST ids (referenced only until read). `read_prefix` gathers the HOT
part (a view of the arena where its ids are consecutive, as before) and copies the HOST
part onto the model's device after it (never a view: its slots may be reused once its
references are dropped, which this does before returning), so the prompt's prefill
starts after the whole match instead of recomputing what the hot tier could not take.

Invariants:
- Every HOST reference `acquire_run` took is dropped here, on every path; on a failure
  the HOT ones are too (nothing reaches the caller).
- The cache covers `prefix_blocks(num_cached_tokens)` chain blocks: the hit's
  `block_ids`, then the HOST blocks read (a HOST block whose tokens the cache would not
  use, the last one when the prompt is cut at its last token, is let go unread). So a
  commit starts past both (`commit_start`): the read blocks are cached in HOST already and
  are neither written again nor referenced; its new blocks name the last of them as
  their parent.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import DynamicCache

from cache.block_manager import AcquiredRun, BlockManager
from cache.kv_arena import KVArena
from cache.tiers import Tier
from shards.kv_cache import make_cache


@dataclass(frozen=True, slots=True)
class PrefixHit:
    """What a request reuses: `block_ids`, the HOT blocks it holds a reference on, and
    `cache`, the model cache of its first `num_cached_tokens` tokens (HOST blocks read
    through included; None when nothing is reused)."""

    block_ids: list[int]
    num_cached_tokens: int
    cache: DynamicCache | None


def prefix_blocks(num_cached_tokens: int, block_size: int) -> int:
    """The chain blocks a cache of `num_cached_tokens` reused tokens was built from (the
    last one cut when the prompt ends inside it)."""
    return -(-num_cached_tokens // block_size)


def read_prefix(blocks: BlockManager, hot: KVArena, host: KVArena | None, config, acquired: AcquiredRun,
                num_prompt_tokens: int) -> PrefixHit:
    """The model cache of `acquired` for a prompt of `num_prompt_tokens`, at least one of
    which is always left to compute. Drops `acquired`'s HOST references (module docstring)."""
    size = blocks.block_size
    hot_ids = acquired.hot_ids
    num_cached = min(acquired.num_blocks * size, num_prompt_tokens - 1)
    num_hot_tokens = max(0, min(len(hot_ids) * size, num_cached))
    num_read = min(len(acquired.host_ids), prefix_blocks(max(0, num_cached - num_hot_tokens), size))
    try:
        kv = None
        if num_cached > 0:
            kv = hot.gather(hot_ids, num_hot_tokens) if num_hot_tokens else None
            if num_read:
                read = host.read(acquired.host_ids[:num_read], num_cached - num_hot_tokens, hot.data.device)
                kv = read if kv is None else [(torch.cat((k, read_k), dim=2), torch.cat((v, read_v), dim=2))
                                              for (k, v), (read_k, read_v) in zip(kv, read)]
    except BaseException:
        blocks.release(hot_ids)
        raise
    finally:
        blocks.release_host(acquired.host_ids)
    if num_cached <= 0:
        return PrefixHit(hot_ids, 0, None)
    return PrefixHit(hot_ids, num_cached, make_cache(config, kv))


def commit_start(blocks: BlockManager, held: list[int], num_cached_tokens: int) -> int:
    """The chain position a request's next commit starts at: past its last held HOT block
    (its prefix's, or one it committed) and past the prefix its cache was built from,
    HOST blocks read through included. Without a read-through it is `len(held)`."""
    past_held = blocks.block(Tier.HOT, held[-1]).position + 1 if held else 0
    return max(past_held, prefix_blocks(num_cached_tokens, blocks.block_size))
