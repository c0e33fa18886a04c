"""The interface between the block manager (mechanism) and an eviction policy.

The manager owns slots, references, hashes, tier moves and events; a policy only
decides *which* block leaves a tier when room is needed, and may, on `apply` and `tick`,
ask the manager to demote, promote (prefetch) or drop blocks ahead of time. LRU, the
forecast-driven predictive policy and the offline Belady oracle all sit behind this one
interface, so the same manager runs them side by side.

Contract (what the manager guarantees to a policy):
- A block is *evictable* iff it is cached (matchable) and its `ref_count` is 0. Every
  change of that status is announced: `on_insert` when a cached block enters a tier
  (new, or moved there), `on_access` when a reference is taken on a cached block,
  `on_release` when its last reference is dropped, `on_remove` when it leaves a tier
  (moved, dropped, or made private by `clear`). Hooks run after the manager updated the
  record, so `block.ref_count`, `tier`, `id` are current.
- `on_release` is called for a request's blocks in REVERSE chain order (tail first),
  as vLLM frees them, so a recency policy evicts a chain tail before head.
- `choose_victim` is a pure query: it returns the id of an evictable block of `tier`, or
  None. The manager then evicts that block (announcing `on_remove`). It never asks for a
  victim while a tier has a free slot. Returning a referenced or unknown block is a bug
  and makes the manager raise.
- Private blocks (never matchable, see `BlockMeta.is_cached`) are never shown to the
  policy.

NOTE: `apply` and `tick` may call back into the manager through `actions`; those calls
trigger the hooks above re-entrantly, so a policy must not be iterating over its own
mutable containers while it calls them (iterate over a copy).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Protocol

from cache.block_meta import BlockMeta
from cache.forecast import Forecast
from cache.hashing import BlockHash
from cache.tiers import Tier


class CacheActions(Protocol):
    """What a policy may read and ask of the manager (`BlockManager` implements it)."""

    @property
    def block_size(self) -> int: ...

    @property
    def bytes_per_block(self) -> int: ...

    def block(self, tier: Tier, block_id: int) -> BlockMeta | None: ...

    def find(self, block_hash: BlockHash) -> BlockMeta | None: ...

    def num_free_blocks(self, tier: Tier) -> int: ...

    def can_demote(self, block_id: int) -> bool: ...

    def demote(self, block_id: int) -> int | None: ...

    def promote(self, host_id: int) -> int | None: ...

    def drop(self, block_id: int, tier: Tier) -> None: ...


class EvictionPolicy(ABC):
    """Chooses eviction victims; optionally acts ahead of time on forecasts and ticks.

    Hooks default to doing nothing, so a policy overrides only what it uses; only
    `choose_victim` is required. A policy instance serves one manager.
    """

    def on_insert(self, block: BlockMeta, now_s: float) -> None:
        """A cached block entered `block.tier` (it is evictable iff `ref_count == 0`)."""

    def on_access(self, block: BlockMeta, session: str | None, now_s: float) -> None:
        """A reference was taken on a cached block (a prefix hit); it is not evictable."""

    def on_release(self, block: BlockMeta, now_s: float) -> None:
        """The last reference on a cached block was dropped; it is now evictable."""

    def on_remove(self, block: BlockMeta) -> None:
        """A cached block left `block.tier` (still set to the tier it left)."""

    @abstractmethod
    def choose_victim(self, tier: Tier, now_s: float, tenant: str | None = None) -> int | None:
        """Id of the evictable block of `tier` to push out, or None if there is none.

        `tenant` is who needs the room (None when unknown), for per-tenant reservations.
        """

    def should_demote(self, block: BlockMeta, now_s: float) -> bool:
        """Whether `block` is worth a slot of a full HOST tier: a HOT victim (True: HOST's
        own victim is dropped to make room for it; False: the HOT victim is dropped), or a
        block a commit writes through (`BlockMoves.commit_to_host`; asked before it is
        placed, with `block.tier` already HOST; False: it and the rest of its run are not
        cached).

        Asked only while HOST has no free slot (with one free, a victim always moves
        there), during the HOT eviction; a policy must not call the manager here. The
        default keeps every victim, as LRU does.
        """
        return True

    def on_full(self, tier: Tier, now_s: float) -> None:
        """`tier` had no free slot and the manager is taking a victim without asking
        (`cache.background_blocks`): what a policy learns from being asked, it learns here."""

    def protects(self, tenant: str, tier: Tier) -> bool:
        """Whether `tenant` holds no more of `tier` than its guaranteed share, so that
        room for another tenant should come from elsewhere first (a pure query). The
        default guarantees nothing."""
        return False

    def apply(self, forecast: Forecast, actions: CacheActions) -> None:
        """A new forecast for one waiting session arrived."""

    def on_session_moved(self, session: str, now_s: float) -> None:
        """`session`'s next request went to another cache: its blocks here are needed
        only by whatever else shares them (until the session comes back here)."""

    def tick(self, now_s: float, actions: CacheActions) -> None:
        """Time passed: expire TTL pins, run due prefetches, and the like."""
