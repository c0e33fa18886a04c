"""Moves between tiers: what policies and operators ask for (demote, promote, drop,
clear), and the promotions a request needs for the HOST part of its match.

`BlockMoves` is a part of `cache.block_manager.BlockManager` (its base class), kept apart
so that each file holds one concept; it works on the manager's `_residency`, `_hot`,
`_host`, `_policy`, `_clock` and reference counting (`_ref`, `_unref`).

Invariants: a block with references is never demoted, promoted or dropped (`_evictable`
refuses it); making room for a promotion never picks the block being promoted; a move
that finds no room changes nothing and says so (None / False).
"""
from __future__ import annotations

from cache.block_meta import BlockMeta, LineageId
from cache.match import Match
from cache.tiers import Tier


class BlockMoves:
    """Tier moves of a `BlockManager` (the module docstring says what they keep)."""

    def can_demote(self, block_id: int) -> bool:
        block = self._hot.get(block_id)
        return block is not None and block.is_cached and block.ref_count == 0 and self._host.num_blocks > 0

    def demote(self, block_id: int) -> int | None:
        """Move an unreferenced cached HOT block to HOST (making room there through the
        policy). Returns its HOST id, or None when HOST has no room."""
        block = self._evictable(Tier.HOT, block_id)
        now = self._clock()
        if not self._residency.make_room(Tier.HOST, now, block.tenant):
            return None
        self._residency.move(block, Tier.HOST, now)
        self._residency.num_demotions += 1
        return block.id

    def promote(self, host_id: int) -> int | None:
        """Move an unreferenced cached HOST block to HOT (evicting through the policy).
        Returns its HOT id, or None when no HOT slot can be freed."""
        block = self._evictable(Tier.HOST, host_id)
        now = self._clock()
        residency = self._residency
        if not residency.can_make_room(Tier.HOT, now, block.tenant):
            return None
        residency.hide(block)  # NOTE: first, so making room never picks it as the HOST victim
        if not residency.make_room(Tier.HOT, now, block.tenant):
            raise RuntimeError("the policy offered a HOT victim, then none")
        residency.move(block, Tier.HOT, now, announce_remove=False)
        residency.num_promotions += 1
        return block.id

    def drop(self, block_id: int, tier: Tier) -> None:
        """Forget an unreferenced cached block of `tier`."""
        self._residency.forget(self._evictable(tier, block_id))

    def clear(self) -> None:
        """Forget every unreferenced block and make every referenced one private.

        Afterwards nothing is matchable (what `AllCleared` tells the router); blocks in use
        stay valid for their holders and are freed at their last release.
        """
        self._residency.clear()

    def _promote_run(
        self, tenant: str, session: str | None, match: Match, uids: list[LineageId] | None, now: float,
        background: bool = False,
    ) -> list[int]:
        """Reference the HOST part of `match` and move it to HOT, in order; new HOT ids."""
        num_hot = len(match.hot_block_ids)
        pending: list[BlockMeta] = []
        for i, host_id in enumerate(match.host_block_ids):
            block = self._host.get(host_id)
            if block is None or not block.is_cached or (uids is not None and block.uid != uids[num_hot + i]):
                break
            self._ref(block, session, now, background)  # NOTE: referenced, so no eviction picks it meanwhile
            pending.append(block)
        promoted: list[int] = []
        for j, block in enumerate(pending):
            if not self._residency.make_room(Tier.HOT, now, tenant):
                for rest in reversed(pending[j:]):
                    self._unref(rest, now)
                break
            self._residency.move(block, Tier.HOT, now)
            self._residency.num_promotions += 1
            promoted.append(block.id)
        return promoted

    def _reuse(self, block: BlockMeta, tenant: str, session: str | None, now: float, background: bool = False) -> bool:
        """Reference a cached block for a commit, promoting it if in HOST; False if no room."""
        self._ref(block, session, now, background)
        if block.tier is Tier.HOT:
            return True
        if not self._residency.make_room(Tier.HOT, now, tenant):
            self._unref(block, now)
            return False
        self._residency.move(block, Tier.HOT, now)
        self._residency.num_promotions += 1
        return True

    def _evictable(self, tier: Tier, block_id: int) -> BlockMeta:
        block = self._residency.pool(tier).get(block_id)
        if block is None:
            raise ValueError(f"{tier.value} slot {block_id} holds no block")
        if not block.is_cached or block.ref_count:
            raise ValueError(f"{tier.value} block {block_id} is in use")
        return block
