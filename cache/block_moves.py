"""Moves between tiers: what policies and operators ask for (demote, promote, drop,
clear), and the promotions a request needs for the HOST part of its match (what HOT has
no room for stays in HOST, referenced, for a caller that reads it there: `acquire_run`).

`BlockMoves` is a part of `cache.block_manager.BlockManager` (its base class), kept apart
so that each file holds one concept; it works on the manager's `_residency`, `_hot`,
`_host`, `_policy`, `_clock` and reference counting (`_ref`, `_unref`).

It also writes a commit through to HOST (`commit_to_host`): a request's new full blocks
that `commit` found no HOT room for (HOT full of blocks in use) are placed in HOST, as a
demotion would place them, so a later request finds them there instead of recomputing.

Invariants: a block with references is never demoted, promoted or dropped (`_evictable`
refuses it); making room for a promotion never picks the block being promoted; a move
that finds no room changes nothing and says so (None / False). A block written through
to HOST enters it unreferenced and cached, under the same room rule and policy calls as
a demoted block (`Residency.host_takes`, then `on_insert`), and only after its parent is
registered: it is matchable exactly when its whole prefix is. A commit's new blocks are
registered together, after room was made for all of them, so the room for one never
comes from another (the run would be left unmatchable past it): each is weighed against
the blocks HOST held before the commit. Nor does it come from the chain's registered HOST
blocks, its prefix's included (the HOST part a request read through and let go): a chain
block the policy offers as HOST's victim is hidden from it until the commit ends, and the
policy is asked again, so HOST's other blocks make the room.
"""
from __future__ import annotations

from collections.abc import Sequence

from cache.block_meta import BlockMeta, LineageId
from cache.hashing import BlockHash
from cache.lineage import continues, token_blocks_offset, verified_run
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

    def commit_to_host(
        self,
        tenant: str,
        session: str | None,
        hashes: Sequence[BlockHash],
        token_blocks: Sequence[Sequence[int]],
        start: int,
        *,
        background: bool = False,
    ) -> list[tuple[int, int]]:
        """Put the blocks `hashes[start:]` in HOST, unreferenced, in order: what `commit`
        could not place in HOT (it returned short). Returns `(chain position, HOST id)`
        per new block, whose KV the caller must write into that HOST slot now (from the
        request's own cache); a block already registered on the chain is passed over.

        `hashes[:start]` must be registered (the caller's committed prefix); otherwise,
        as with no HOST tier, nothing is placed. `token_blocks` has one entry per hash,
        or per hash from `start` on. Stops at the first block HOST takes no room for
        (`Residency.host_takes`, as for a demoted block: a background one only into a
        free slot), at a hash held by a different block in use, and where HOST has no
        room but the chain's own. The new blocks take their slots as HOST makes room and
        are registered (shown to the policy) in chain order when the run ends, so no room
        is made from them; a registered HOST block of the chain (of `hashes[:start]` too)
        that the policy offers as the victim is set aside (hidden from the policy, shown
        again when the run ends) and the next victim taken instead: pushing it out would
        leave every block after it unmatchable. Should room come from the chain after all
        (the policy's victim changed between the asking and the evicting: predictive
        re-ranks in `should_demote`), the new blocks past the lost one are not placed, their
        slots freed: no block is registered behind a lost one.
        """
        num_blocks = len(hashes)
        offset = token_blocks_offset(num_blocks, len(token_blocks), start)
        residency = self._residency
        if self._host.num_blocks == 0 or start == num_blocks:
            return []
        now = self._clock()
        salt = self.salt_for(tenant)
        prefix = verified_run(residency.find, salt, hashes, token_blocks if offset == 0 else None, start)
        if len(prefix) != start:
            return []
        parent = prefix[-1] if start else None
        # the chain's registered HOST blocks, the prefix's included (a request that read its
        # HOST part through has let it go): room must not come from them
        chain: dict[BlockMeta, None] = dict.fromkeys(block for block in prefix if block.tier is Tier.HOST)
        set_aside: list[BlockMeta] = []   # chain blocks offered as HOST's victim: hidden from the policy meanwhile
        pending: list[BlockMeta] = []   # new blocks, each in a slot taken for it; registered together at the end
        try:
            for i in range(start, num_blocks):
                block_hash = hashes[i]
                tokens = token_blocks[i - offset]
                tokens = tokens if type(tokens) is tuple else tuple(tokens)
                parent_uid = parent.uid if parent is not None else None
                found = residency.find(block_hash)
                if found is not None:
                    if continues(found, parent_uid, salt) and found.tokens == tokens:
                        if found.tier is Tier.HOST:
                            chain[found] = None
                        parent = found
                        continue
                    if found.ref_count:
                        break
                    residency.forget(found)
                block = BlockMeta(id=-1, tier=Tier.HOST, uid=LineageId(self._next_uid), hash=block_hash,
                                  tokens=tokens, tenant=tenant, salt=salt,
                                  parent_hash=hashes[i - 1] if i > 0 else None, parent_uid=parent_uid, position=i,
                                  created_s=now, last_access_s=now, is_background=background)
                self._note_session(block, session, now)
                if not self._host_room(block, chain, set_aside, now, background):
                    break
                block.id = self._host.take()
                self._next_uid += 1
                pending.append(block)
                parent = block
        finally:
            for block in set_aside:
                residency.show(block, now)
        lost = [block.position for block in chain if not block.is_cached]
        if lost:   # room came from the chain after all (the victim changed once asked): past it nothing matches
            kept = [block for block in pending if block.position < min(lost)]
            for block in pending[len(kept):]:
                self._host.give_back(block.id)
            pending = kept
        placed: list[tuple[int, int]] = []
        for block in pending:
            residency.add(block, now)
            placed.append((block.position, block.id))
        residency.num_host_commits += len(pending)
        residency.emit_stored([block.hash for block in pending], tenant, Tier.HOST)
        return placed

    def _host_room(self, block: BlockMeta, chain: dict[BlockMeta, None], set_aside: list[BlockMeta], now: float,
                   background: bool) -> bool:
        """Whether HOST has made a free slot for `block`, written through
        (`Residency.host_takes`), its room never made from `chain`: a chain block offered as
        HOST's victim is hidden from the policy (into `set_aside`, for the caller to show
        again) and the next victim asked for."""
        residency = self._residency
        victim = None
        if self._host.num_free_blocks == 0:
            victim = residency.next_victim(Tier.HOST, now, block.tenant)
            while victim in chain:   # room made from the chain would leave the new block unmatchable
                residency.hide(victim)
                set_aside.append(victim)
                victim = residency.next_victim(Tier.HOST, now, block.tenant)
        if not residency.host_takes(block, now, background):
            return False
        # another block than the one asked for made the room (the victim changed since):
        # if it was one of the chain, the slot stays free
        return victim is None or not victim.is_cached or all(earlier.is_cached for earlier in chain)

    def _promote_run(
        self, tenant: str, session: str | None, match: Match, uids: list[LineageId] | None, now: float,
        background: bool = False, read_host: bool = False,
    ) -> tuple[list[int], list[int]]:
        """Reference the HOST part of `match` and move it to HOT, in order, while HOT has
        room. Returns the new HOT ids and, with `read_host`, the HOST ids of the rest, still
        referenced (the caller reads them where they are); without it the rest is let go."""
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
                if read_host:
                    return promoted, [rest.id for rest in pending[j:]]
                for rest in reversed(pending[j:]):
                    self._unref(rest, now)
                break
            self._residency.move(block, Tier.HOT, now)
            self._residency.num_promotions += 1
            promoted.append(block.id)
        return promoted, []

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
