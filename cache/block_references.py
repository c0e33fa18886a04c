"""Block references: creating a referenced HOT block, taking and dropping references
(`release_host`: those a request took on the HOST blocks it reads through), and the
sessions each block remembers.

`BlockReferences` is a part of `cache.block_manager.BlockManager` (its base class), kept
apart so that each file holds one concept; it works on the manager's `_residency`, `_hot`,
`_policy`, `_clock`, `_max_sessions`, `_next_uid` and `_num_referenced`.

Invariants:
- `_num_referenced` is the number of blocks with `ref_count > 0`: it changes only when a
  block's count leaves or reaches zero.
- Each new block gets the next `LineageId` (`_next_uid`); none is ever given twice.
- The policy hears only of cached blocks: an access for every reference taken, a release
  when the last one is dropped. A private block is freed at its last release.
- A block keeps at most `max_sessions_per_block` sessions, most recent last; the oldest
  leaves first.
"""
from __future__ import annotations

from collections.abc import Sequence

from cache.block_meta import BlockMeta, LineageId
from cache.hashing import BlockHash
from cache.tiers import Tier


class BlockReferences:
    """Reference bookkeeping of a `BlockManager` (the module docstring says what it keeps)."""

    def _new_block(
        self,
        tenant: str,
        session: str | None,
        salt: bytes,
        hashes: Sequence[BlockHash],
        position: int,
        tokens: tuple[int, ...],
        parent_uid: LineageId | None,
        is_cached: bool,
        now: float,
        background: bool = False,
    ) -> BlockMeta:
        """Create a referenced block in a free HOT slot (the caller made room);
        `background` for a flex request's (`cache.background_blocks`)."""
        block_id = self._hot.take()
        if block_id is None:
            raise RuntimeError("no free HOT slot after making room")
        block = BlockMeta(
            id=block_id,
            tier=Tier.HOT,
            uid=LineageId(self._next_uid),
            hash=hashes[position],
            tokens=tokens,
            tenant=tenant,
            salt=salt,
            parent_hash=hashes[position - 1] if position > 0 else None,
            parent_uid=parent_uid,
            position=position,
            ref_count=1,
            created_s=now,
            last_access_s=now,
            is_cached=is_cached,
            is_background=background,
        )
        self._next_uid += 1
        self._num_referenced += 1
        self._note_session(block, session, now)
        self._residency.add(block, now)
        return block

    def _ref(self, block: BlockMeta, session: str | None, now: float, background: bool = False) -> None:
        """Take a reference for a request (`background`: a flex one, which leaves the
        block's background mark as it is; any other request clears it)."""
        if block.is_background:   # only background blocks are in the index
            self._residency.background.taken(block)
            block.is_background = background
        if block.ref_count == 0:
            self._num_referenced += 1
        block.ref_count += 1
        block.num_hits += 1
        block.last_access_s = now
        self._note_session(block, session, now)
        if block.is_cached:
            self._policy.on_access(block, session, now)

    def _unref(self, block: BlockMeta, now: float) -> None:
        block.ref_count -= 1
        if block.ref_count:
            return
        self._num_referenced -= 1
        block.last_access_s = now
        if block.is_cached:
            self._policy.on_release(block, now)
            if block.is_background:
                self._residency.background.evictable(block)
        else:
            self._residency.free_private(block)

    def release_host(self, host_ids: Sequence[int]) -> None:
        """Drop one reference per HOST id of an `AcquiredRun` (the caller has read them),
        tail first; as `release`, a ValueError on an id holding no reference."""
        self._release(Tier.HOST, host_ids)

    def _release(self, tier: Tier, block_ids: Sequence[int]) -> None:
        """Drop one reference per id of `tier`, tail first (the reverse of `block_ids`)."""
        now = self._clock()
        pool = self._residency.pool(tier)
        for block_id in reversed(block_ids):
            block = pool.get(block_id)
            if block is None or block.ref_count <= 0:
                raise ValueError(f"{tier.value} block {block_id} holds no reference")
            self._unref(block, now)

    def _note_session(self, block: BlockMeta, session: str | None, now: float) -> None:
        """Record `session` as the block's most recent user, keeping at most
        `max_sessions_per_block` sessions (the oldest leaves first)."""
        if session is None:
            return
        sessions = block.sessions
        if session in sessions:
            del sessions[session]
        elif len(sessions) >= self._max_sessions:
            del sessions[next(iter(sessions))]
        sessions[session] = now
