"""KV-cache events for a router's prefix index (the shape of vLLM's KV events).

The block manager appends these to an in-memory queue; `BlockManager.take_events`
drains it. Replaying the events in order onto an empty index yields exactly the set of
matchable (hash, tier) pairs of the manager.
"""
from __future__ import annotations

from dataclasses import dataclass

from cache.hashing import BlockHash
from cache.tiers import Tier


@dataclass(frozen=True, slots=True)
class BlockStored:
    """`hashes` (a chain, in order) became matchable in `tier`; `parent_hash` is the
    hash of the block before the first one (None when it is a first block)."""

    hashes: tuple[BlockHash, ...]
    tier: Tier
    tenant: str
    parent_hash: BlockHash | None = None


@dataclass(frozen=True, slots=True)
class BlockRemoved:
    """`hashes` are no longer matchable in `tier` (dropped, or moved to another tier)."""

    hashes: tuple[BlockHash, ...]
    tier: Tier


@dataclass(frozen=True, slots=True)
class AllCleared:
    """Nothing is matchable any more, in any tier."""


CacheEvent = BlockStored | BlockRemoved | AllCleared
