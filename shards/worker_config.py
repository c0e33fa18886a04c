"""A model worker's settings, and its cache statistics as plain data for the wire.

Invariant: `WorkerConfig` is frozen and made of builtins (it crosses process and Ray
boundaries as is).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

DEFAULT_CHUNK_TOKENS = 128   # prompt tokens per prefill forward pass (shards.prefill)


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    model: str = "smollm2"
    device: str = "cpu"  # where the weights and the hot KV tier live: "cpu", "cuda[:N]"
    dtype: str = "auto"  # of the weights and the KV cache: "float32", "bfloat16", "float16", "auto"
    num_hot_blocks: int = 4096
    num_host_blocks: int = 0
    block_size: int = 16
    policy: str = "lru"
    policy_options: tuple[tuple[str, object], ...] = ()  # make_policy keyword arguments
    max_running: int = 8
    decode_batch: int = 16  # running requests decoded per forward pass (1: one at a time)
    num_threads: int = 1
    tenant_weights: tuple[tuple[str, float], ...] = ()
    max_running_hard: int | None = None  # None: 4 x max_running
    prefill_chunk_tokens: int = DEFAULT_CHUNK_TOKENS
    max_decode_stall_s: float | None = None  # None: prefills first, however long the pause
    decodes_ride_chunks: bool = True  # overdue decodes ride prefill chunks' passes (else: own pass)
    prefill_order: str = "deadline"  # or "arrival" (shards.prefill_order)
    events_interval_s: float = 0.01
    snapshot_interval_s: float = 5.0
    measure_costs: bool = True
    prefix_caching: bool = True
    flex_blocks_evicted_first: bool = True  # cache.background_blocks
    inline_transfers: bool = False  # prefix copies travel as bytes (no shared memory)
    event_batches: bool = True  # a decode pass's messages go as one EventBatch (else one by one)


def stats_as_dict(stats) -> dict:
    """CacheStats as plain builtins, to cross the process boundary."""
    return {
        "tenants": {name: dataclasses.asdict(t) for name, t in stats.tenants.items()},
        "tiers": {tier.value: dataclasses.asdict(t) for tier, t in stats.tiers.items()},
        "num_demotions": stats.num_demotions, "num_promotions": stats.num_promotions,
        "num_drops": stats.num_drops, "num_host_commits": stats.num_host_commits,
        "num_referenced_blocks": stats.num_referenced_blocks,
    }
