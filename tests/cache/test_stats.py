"""Stats records: derived values."""
from __future__ import annotations

from cache.stats import CacheStats, TenantStats, TierStats


def test_tenant_stats_hit_ratio_none_before_queries() -> None:
    assert TenantStats().hit_ratio is None
    stats = TenantStats(num_query_tokens=100, num_hot_hit_tokens=30, num_host_hit_tokens=20, num_miss_tokens=50)
    assert stats.num_hit_tokens == 50
    assert stats.hit_ratio == 0.5


def test_tier_stats_bytes() -> None:
    tier = TierStats(num_blocks=10, num_used_blocks=4, num_free_blocks=6, num_cached_blocks=3, bytes_per_block=8)
    assert (tier.used_bytes, tier.free_bytes, tier.capacity_bytes) == (32, 48, 80)


def test_cache_stats_overall_sums_tenants() -> None:
    stats = CacheStats(
        tenants={
            "a": TenantStats(1, 10, 4, 0, 6, 2, 0),
            "b": TenantStats(2, 20, 0, 8, 12, 1, 3),
        }
    )
    assert stats.overall() == TenantStats(3, 30, 4, 8, 18, 3, 3)
