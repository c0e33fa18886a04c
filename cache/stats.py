"""Counters of the block manager, as plain records.

`BlockManager.stats()` returns a fresh `CacheStats` snapshot; mutating it never changes
the manager.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from cache.tiers import Tier


@dataclass(slots=True)
class TenantStats:
    """One tenant's lookups and footprint.

    Invariant: `num_query_tokens == num_hot_hit_tokens + num_host_hit_tokens +
    num_miss_tokens` (hits are counted at most up to the prompt length). Host hits are
    blocks found in HOST and promoted back for the request; a host block that could not
    be promoted counts as a miss. `num_hot_blocks`/`num_host_blocks` count the slots
    currently holding blocks this tenant created (private ones included).
    """

    num_requests: int = 0
    num_query_tokens: int = 0
    num_hot_hit_tokens: int = 0
    num_host_hit_tokens: int = 0
    num_miss_tokens: int = 0
    num_hot_blocks: int = 0
    num_host_blocks: int = 0

    @property
    def num_hit_tokens(self) -> int:
        return self.num_hot_hit_tokens + self.num_host_hit_tokens

    @property
    def hit_ratio(self) -> float | None:
        """Hit tokens / query tokens; None before the first query."""
        if self.num_query_tokens == 0:
            return None
        return self.num_hit_tokens / self.num_query_tokens


@dataclass(slots=True)
class TierStats:
    """Occupancy and churn of one tier.

    Invariant: `num_used_blocks + num_free_blocks == num_blocks`; `num_cached_blocks`
    (matchable) is at most `num_used_blocks`. `num_evictions` counts blocks pushed out of
    this tier to make room (demoted from HOT, or dropped), `num_background_evictions` those
    of them only flex requests had used (`cache.background_blocks`).
    """

    num_blocks: int
    num_used_blocks: int
    num_free_blocks: int
    num_cached_blocks: int
    bytes_per_block: int
    num_evictions: int = 0
    num_background_evictions: int = 0

    @property
    def used_bytes(self) -> int:
        return self.num_used_blocks * self.bytes_per_block

    @property
    def free_bytes(self) -> int:
        return self.num_free_blocks * self.bytes_per_block

    @property
    def capacity_bytes(self) -> int:
        return self.num_blocks * self.bytes_per_block


@dataclass(slots=True)
class CacheStats:
    """A snapshot of everything the block manager counts.

    `num_drops` counts matchable blocks forgotten for any reason (eviction without a host
    tier, a host victim, an explicit drop, `clear`, a stale block replaced);
    `num_collisions` counts commits where a hash was taken by a different, in-use block,
    so the new block stayed private; `num_host_commits` counts new blocks a commit wrote
    through to HOST because HOT had no room (every slot held by running requests).
    """

    tenants: dict[str, TenantStats] = field(default_factory=dict)
    tiers: dict[Tier, TierStats] = field(default_factory=dict)
    num_demotions: int = 0
    num_promotions: int = 0
    num_drops: int = 0
    num_collisions: int = 0
    num_host_commits: int = 0
    num_dropped_events: int = 0
    num_referenced_blocks: int = 0  # held by requests still running; 0 once all have ended

    def overall(self) -> TenantStats:
        """All tenants' counters summed."""
        total = TenantStats()
        for tenant in self.tenants.values():
            total.num_requests += tenant.num_requests
            total.num_query_tokens += tenant.num_query_tokens
            total.num_hot_hit_tokens += tenant.num_hot_hit_tokens
            total.num_host_hit_tokens += tenant.num_host_hit_tokens
            total.num_miss_tokens += tenant.num_miss_tokens
            total.num_hot_blocks += tenant.num_hot_blocks
            total.num_host_blocks += tenant.num_host_blocks
        return total
