"""Belady's offline oracle: evict the block whose next use lies farthest in the future.

Only a simulator can run it: before each request it calls `note_next_use` for every
block hash of the request with when that hash is next used (any increasing measure: the
simulator passes request indices; `math.inf` for never). Among blocks used next at the same time the deepest chain
position goes first, so a prefix is never kept without its own head when a tie allows.

Invariants: per tier, `_keys` holds exactly the evictable (cached, unreferenced) blocks
with the sequence number of their latest heap entry; an entry is live iff its number
is that one
(lazy invalidation), so every hook is O(log n) and `choose_victim` amortised O(log n).

NOTE: optimal for block hits when all blocks cost the same and every use is a demand
fetch; it knows nothing of the HOST tier's lower cost or of prefix runs, so a forecast
policy can beat it on TTFT (never on block hits in a HOT-only cache).
"""
from __future__ import annotations

import heapq
import math

from cache.block_meta import BlockMeta
from cache.hashing import BlockHash
from cache.policy import EvictionPolicy
from cache.tiers import Tier



class BeladyPolicy(EvictionPolicy):
    """Farthest-next-use eviction, fed the future by the simulator."""

    __slots__ = ("_next_use", "_keys", "_heaps", "_seq")

    def __init__(self) -> None:
        self._next_use: dict[BlockHash, float] = {}
        # NOTE: indexed by `tier is Tier.HOST` (0 HOT, 1 HOST): hashing an Enum runs Python code
        self._keys: tuple[dict[BlockMeta, int], dict[BlockMeta, int]] = ({}, {})
        self._heaps: tuple[list[tuple[float, int, int, BlockMeta]], ...] = ([], [])
        self._seq = 0

    def note_next_use(self, block_hash: BlockHash, next_use: float) -> None:
        """`block_hash` is next used at `next_use` (`math.inf`: never)."""
        self._next_use[block_hash] = next_use

    def forget_hash(self, block_hash: BlockHash) -> None:
        self._next_use.pop(block_hash, None)

    def _push(self, block: BlockMeta) -> None:
        self._seq += 1
        index = block.tier is Tier.HOST
        self._keys[index][block] = self._seq
        next_use = self._next_use.get(block.hash, math.inf)
        heapq.heappush(self._heaps[index], (-next_use, -block.position, self._seq, block))

    def on_insert(self, block: BlockMeta, now_s: float) -> None:
        if block.ref_count == 0:
            self._push(block)

    def on_access(self, block: BlockMeta, session: str | None, now_s: float) -> None:
        self._keys[block.tier is Tier.HOST].pop(block, None)

    def on_release(self, block: BlockMeta, now_s: float) -> None:
        self._push(block)

    def on_remove(self, block: BlockMeta) -> None:
        self._keys[block.tier is Tier.HOST].pop(block, None)

    def choose_victim(self, tier: Tier, now_s: float, tenant: str | None = None) -> int | None:
        heap = self._heaps[tier is Tier.HOST]
        keys = self._keys[tier is Tier.HOST]
        while heap:
            _, _, seq, block = heap[0]
            if keys.get(block) == seq:
                return block.id
            heapq.heappop(heap)
        return None
