"""What the block manager knows about one block slot in use.

Policies read these records (and may keep references to them); only the block manager
writes them. A record follows its block across tiers: a demotion or promotion changes
`tier` and `id`, never `uid`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NewType

from cache.hashing import BlockHash
from cache.tiers import Tier

LineageId = NewType("LineageId", int)


@dataclass(slots=True, eq=False)
class BlockMeta:
    """One block's bookkeeping.

    Invariants: `(tier, id)` names the slot that holds the block's KV; `uid` is unique for
    the manager's lifetime and never reused, so `parent_uid` names the exact block whose
    KV this block's KV was computed after (a hash alone could collide). `position` is the
    block's index in its chain (0 for the first block, whose `parent_uid` is None).
    `is_cached` is True while the block is in the manager's hash index (matchable);
    a block outside it is private to the requests holding it and is freed at its last
    release. `sessions` maps the most recent sessions that used it (at most the
    manager's `max_sessions_per_block`) to their last use, oldest first.
    `is_background` is True while only flex requests have used the block
    (`cache.background_blocks`: such blocks are evicted first).

    `eq=False`: records compare and hash by identity, so policies can keep them in sets.
    """

    id: int
    tier: Tier
    uid: LineageId
    hash: BlockHash
    tokens: tuple[int, ...]
    tenant: str
    salt: bytes
    parent_hash: BlockHash | None
    parent_uid: LineageId | None
    position: int
    ref_count: int = 0
    created_s: float = 0.0
    last_access_s: float = 0.0
    num_hits: int = 0
    is_cached: bool = True
    sessions: dict[str, float] = field(default_factory=dict)
    is_background: bool = False
