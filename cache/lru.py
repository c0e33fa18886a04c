"""Least-recently-used eviction, the reactive baseline (what vLLM and SGLang do)."""
from __future__ import annotations

from collections import OrderedDict

from cache.block_meta import BlockMeta
from cache.policy import EvictionPolicy
from cache.tiers import Tier


class LRUPolicy(EvictionPolicy):
    """Evicts the evictable block whose last reference was dropped longest ago.

    Invariant: per tier, `_evictable` holds exactly the ids of the cached blocks with
    `ref_count == 0`, least recently released first. Every hook is O(1) (OrderedDict
    is a linked hash map, so taking its first key stays O(1) under heavy churn).
    A block demoted to (or prefetched into) a tier counts as used at that moment.
    Forecasts and ticks are ignored.
    """

    __slots__ = ("_evictable",)

    def __init__(self) -> None:
        self._evictable: dict[Tier, OrderedDict[int, None]] = {tier: OrderedDict() for tier in Tier}

    def on_insert(self, block: BlockMeta, now_s: float) -> None:
        if block.ref_count == 0:
            evictable = self._evictable[block.tier]
            evictable[block.id] = None
            evictable.move_to_end(block.id)

    def on_access(self, block: BlockMeta, session: str | None, now_s: float) -> None:
        self._evictable[block.tier].pop(block.id, None)

    def on_release(self, block: BlockMeta, now_s: float) -> None:
        evictable = self._evictable[block.tier]
        evictable[block.id] = None
        evictable.move_to_end(block.id)

    def on_remove(self, block: BlockMeta) -> None:
        self._evictable[block.tier].pop(block.id, None)

    def choose_victim(self, tier: Tier, now_s: float, tenant: str | None = None) -> int | None:
        evictable = self._evictable[tier]
        if not evictable:
            return None
        return next(iter(evictable))

    def num_evictable(self, tier: Tier) -> int:
        return len(self._evictable[tier])
