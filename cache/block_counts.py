"""What a `BlockManager` holds, read-only: sizes, slots, the hash index, and a snapshot
of every counter.

`BlockCounts` is a part of `cache.block_manager.BlockManager` (its base class), kept
apart so that each file holds one concept; it reads the manager's `_residency`, `_hot`,
`_host`, `_policy`, `_block_size`, `_bytes_per_block`, `_tenants`, `_num_collisions` and
`_num_referenced`, and changes nothing.
"""
from __future__ import annotations

import dataclasses

from cache.block_meta import BlockMeta
from cache.hashing import BlockHash
from cache.policy import EvictionPolicy
from cache.stats import CacheStats, TenantStats, TierStats
from cache.tiers import Tier


class BlockCounts:
    """Read access to a `BlockManager` (the module docstring says what it reads)."""

    @property
    def block_size(self) -> int:
        return self._block_size

    @property
    def bytes_per_block(self) -> int:
        return self._bytes_per_block

    @property
    def policy(self) -> EvictionPolicy:
        return self._policy

    @property
    def num_hot_blocks(self) -> int:
        return self._hot.num_blocks

    @property
    def num_free_hot_blocks(self) -> int:
        return self._hot.num_free_blocks

    @property
    def num_used_hot_blocks(self) -> int:
        return self._hot.num_used_blocks

    @property
    def num_host_blocks(self) -> int:
        return self._host.num_blocks

    @property
    def num_free_host_blocks(self) -> int:
        return self._host.num_free_blocks

    @property
    def num_used_host_blocks(self) -> int:
        return self._host.num_used_blocks

    def num_free_blocks(self, tier: Tier) -> int:
        return self._residency.pool(tier).num_free_blocks

    def block(self, tier: Tier, block_id: int) -> BlockMeta | None:
        """The block in slot `block_id` of `tier`; None for a free slot."""
        return self._residency.pool(tier).get(block_id)

    def blocks(self, tier: Tier) -> list[BlockMeta]:
        """Every block held in `tier` (a snapshot), by slot id."""
        return list(self._residency.pool(tier).blocks())

    def find(self, block_hash: BlockHash) -> BlockMeta | None:
        """The matchable block registered under `block_hash`, in any tier."""
        return self._residency.find(block_hash)

    def stats(self) -> CacheStats:
        """A snapshot of all counters (a copy: safe to keep and change)."""
        residency = self._residency
        tiers = {
            tier: TierStats(
                num_blocks=pool.num_blocks,
                num_used_blocks=pool.num_used_blocks,
                num_free_blocks=pool.num_free_blocks,
                num_cached_blocks=residency.num_cached[tier],
                bytes_per_block=self._bytes_per_block,
                num_evictions=residency.num_evictions[tier],
                num_background_evictions=residency.num_background_evictions[tier],
            )
            for tier, pool in ((Tier.HOT, self._hot), (Tier.HOST, self._host))
        }
        tenants: dict[str, TenantStats] = {}
        for name in set(self._tenants) | residency.tenants():
            stats = dataclasses.replace(self._tenants.get(name) or TenantStats())
            stats.num_hot_blocks = residency.num_tenant_blocks(Tier.HOT, name)
            stats.num_host_blocks = residency.num_tenant_blocks(Tier.HOST, name)
            tenants[name] = stats
        return CacheStats(
            tenants=tenants,
            tiers=tiers,
            num_demotions=residency.num_demotions,
            num_promotions=residency.num_promotions,
            num_drops=residency.num_drops,
            num_host_commits=residency.num_host_commits,
            num_collisions=self._num_collisions,
            num_dropped_events=residency.num_dropped_events,
            num_referenced_blocks=self._num_referenced,
        )
