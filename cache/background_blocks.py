"""Blocks only flex requests have used: evicted before any block an interactive request used.

A flex request (OpenAI's `service_tier: "flex"`, and the Batch API's lines) is work nobody
waits on token by token. The blocks it fills are marked `BlockMeta.is_background`; the
mark goes the moment a default-tier request takes a reference on the block (its system
prompt is an agent's too), and never comes back while the block is cached. When a tier
needs room, the block manager evicts its oldest evictable background block first and asks
the policy only when there is none, whatever the policy (LRU, predictive, the anchors):
batch work can never push an agent's context out while its own blocks could go instead.
Among themselves, background blocks leave in the order they were released (LRU), except
that a tenant the policy protects (within its guaranteed share, `EvictionPolicy.protects`)
keeps its own unless it is the one asking for room.

Invariant: `_by_tier[tier]` holds exactly the cached, unreferenced, background blocks of
`tier`, oldest release first; `Residency` and the manager's reference counting tell this
index of each change at the same points they tell the policy.
"""
from __future__ import annotations

from itertools import islice

from cache.block_meta import BlockMeta, LineageId
from cache.tiers import Tier


class BackgroundBlocks:
    """The evictable background blocks of each tier, oldest release first."""

    def __init__(self) -> None:
        self._by_tier: dict[Tier, dict[LineageId, BlockMeta]] = {tier: {} for tier in Tier}
        self._num_blocks = 0   # in every tier: most evictions find none, and ask nothing more

    def evictable(self, block: BlockMeta) -> None:
        """`block` became evictable (released, or cached in a tier): index it, newest
        last, when it is background."""
        if block.is_background and block.is_cached and block.ref_count == 0:
            blocks = self._by_tier[block.tier]
            if blocks.pop(block.uid, None) is None:
                self._num_blocks += 1
            blocks[block.uid] = block

    def taken(self, block: BlockMeta) -> None:
        """`block` is referenced, leaves its tier or is no longer background: not a victim."""
        if self._num_blocks and self._by_tier[block.tier].pop(block.uid, None) is not None:
            self._num_blocks -= 1

    def oldest(self, tier: Tier, count: int = 1) -> list[BlockMeta]:
        """Up to `count` background blocks of `tier`, released longest ago first."""
        return list(islice(self._by_tier[tier].values(), count)) if self._num_blocks else []
