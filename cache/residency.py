"""Where each block lives: tier slots, the hash index, tier moves, evictions, events.

`Residency` is the lower half of the block manager. It does not know about requests;
`BlockManager` takes and drops references and decides what to register, and this class
keeps the slots, the index and the event queue consistent while blocks enter, move
between and leave tiers, asking the policy for victims when a tier is full.

Invariants:
- A block is in the hash index (`is_cached`) iff the policy has been told it is in its
  tier (`on_insert` ... `on_remove`), and at most one block is indexed per hash; the
  background index (`cache.background_blocks`) is told at the same points.
- With `evict_background_first`, a tier needing room loses its oldest evictable
  background block before the policy is asked for a victim (passing over those of
  tenants the policy `protects`, unless they ask).
- A policy learns of every full tier: asked for a victim, or told (`on_full`).
- Only unreferenced cached blocks are evicted, moved or dropped.
- A block enters a full HOST by one rule (`host_takes`), whether demoted from HOT or
  written through by a commit that found no HOT room (`BlockMoves.commit_to_host`).
- The event queue, replayed in order, gives exactly the indexed (hash, tier) pairs;
  `AllCleared` empties the replayed set.
"""
from __future__ import annotations

from collections import deque

from cache.background_blocks import BackgroundBlocks
from cache.block_meta import BlockMeta
from cache.events import AllCleared, BlockRemoved, BlockStored, CacheEvent
from cache.hashing import BlockHash
from cache.mover import BlockMover
from cache.policy import EvictionPolicy
from cache.pool import TierPool
from cache.tiers import Tier


MAX_BACKGROUND_SKIPS = 8   # protected tenants' background blocks passed over before the policy decides


class Residency:
    """The slots of the HOT and HOST tiers and the hash index over them."""

    def __init__(
        self,
        *,
        num_hot_blocks: int,
        num_host_blocks: int,
        policy: EvictionPolicy,
        mover: BlockMover | None,
        max_pending_events: int | None,
        evict_background_first: bool = True,
    ) -> None:
        self.hot = TierPool(Tier.HOT, num_hot_blocks)
        self.host = TierPool(Tier.HOST, num_host_blocks)
        self.policy = policy
        self.background = BackgroundBlocks()
        self.evict_background_first = evict_background_first
        self.num_background_evictions = {tier: 0 for tier in Tier}
        self._pools = {Tier.HOT: self.hot, Tier.HOST: self.host}
        self._mover = mover
        self._by_hash: dict[BlockHash, BlockMeta] = {}
        self._events: deque[CacheEvent] = deque(maxlen=max_pending_events)
        self._tenant_blocks: dict[Tier, dict[str, int]] = {tier: {} for tier in Tier}
        self.num_cached = {tier: 0 for tier in Tier}
        self.num_evictions = {tier: 0 for tier in Tier}
        self.num_demotions = 0
        self.num_promotions = 0
        self.num_host_commits = 0   # new blocks a commit wrote through to HOST (no HOT room)
        self.num_drops = 0
        self.num_dropped_events = 0

    def pool(self, tier: Tier) -> TierPool:
        return self._pools[tier]

    def find(self, block_hash: BlockHash) -> BlockMeta | None:
        return self._by_hash.get(block_hash)

    def num_tenant_blocks(self, tier: Tier, tenant: str) -> int:
        return self._tenant_blocks[tier].get(tenant, 0)

    def tenants(self) -> set[str]:
        return set(self._tenant_blocks[Tier.HOT]) | set(self._tenant_blocks[Tier.HOST])

    # ---- blocks entering and leaving ---------------------------------------------------

    def add(self, block: BlockMeta, now: float) -> None:
        """Store a new block in the slot `block.id` just taken from its tier's pool;
        index it (and show it to the policy) if `block.is_cached`."""
        self._pools[block.tier].put(block)
        self._count(block.tenant, block.tier, +1)
        if block.is_cached:
            self._by_hash[block.hash] = block
            self.num_cached[block.tier] += 1
            self.show(block, now)

    def free_private(self, block: BlockMeta) -> None:
        """Free the slot of a private block (its last holder released it)."""
        self._pools[block.tier].remove(block)
        self._count(block.tenant, block.tier, -1)

    def forget(self, block: BlockMeta, *, emit: bool = True) -> None:
        """Drop an unreferenced cached block: unindex it and free its slot."""
        tier = block.tier
        self.unindex(block)
        self._pools[tier].remove(block)
        self._count(block.tenant, tier, -1)
        self.num_drops += 1
        if emit:
            self.emit(BlockRemoved((block.hash,), tier))

    def unindex(self, block: BlockMeta) -> None:
        """Make a cached block private: unmatchable and unknown to the policy."""
        self.hide(block)
        del self._by_hash[block.hash]
        self.num_cached[block.tier] -= 1
        block.is_cached = False

    def clear(self) -> None:
        """Forget every unreferenced block, make the referenced ones private, and emit
        `AllCleared`: afterwards nothing is indexed."""
        for pool in (self.hot, self.host):
            for block in pool.blocks():
                if not block.is_cached:
                    continue
                if block.ref_count == 0:
                    self.forget(block, emit=False)
                else:
                    self.unindex(block)
        self.emit(AllCleared())

    # ---- room and moves -----------------------------------------------------------

    def can_make_room(self, tier: Tier, now: float, tenant: str | None) -> bool:
        """Whether `make_room(tier, ...)` would succeed (no change made)."""
        pool = self._pools[tier]
        if pool.num_free_blocks:
            return True
        return pool.num_blocks > 0 and (self._background_victim(tier, now, tenant) is not None
                                        or self.policy.choose_victim(tier, now, tenant) is not None)

    def next_victim(self, tier: Tier, now: float, tenant: str | None) -> BlockMeta | None:
        """The block `make_room(tier, ...)` would push out now (no change made); None when
        the tier has a free slot or no evictable block."""
        pool = self._pools[tier]
        if pool.num_free_blocks or pool.num_blocks == 0:
            return None
        victim = self._background_victim(tier, now, tenant)
        if victim is None:
            victim_id = self.policy.choose_victim(tier, now, tenant)
            victim = None if victim_id is None else pool.get(victim_id)
        return victim

    def make_room(self, tier: Tier, now: float, tenant: str | None) -> bool:
        """Ensure a free slot in `tier`, evicting a victim if needed: the oldest
        background block (`cache.background_blocks`), else the policy's.

        A HOT victim is demoted when HOST has a free slot, or when the policy finds it
        worth pushing HOST's own victim out (`should_demote`, never for a background
        block) and HOST can make room; else it is dropped. A HOST victim is dropped.
        False when the tier has no evictable block.
        """
        pool = self._pools[tier]
        if pool.num_free_blocks:
            return True
        if pool.num_blocks == 0:
            return False
        victim = self._background_victim(tier, now, tenant)
        is_background = victim is not None
        if victim is None:
            victim_id = self.policy.choose_victim(tier, now, tenant)
            if victim_id is None:
                return False
            victim = pool.get(victim_id)
            if victim is None or victim.ref_count or not victim.is_cached:
                raise RuntimeError(f"policy chose {tier.value} block {victim_id}, which is not evictable")
        if victim.is_background:   # whichever path chose it (the policy's too: not flex-first, or none left)
            self.num_background_evictions[tier] += 1
        self.num_evictions[tier] += 1
        if tier is Tier.HOT and self.host_takes(victim, now, is_background):
            self.move(victim, Tier.HOST, now)
            self.num_demotions += 1
        else:
            self.forget(victim)
        return True

    def host_takes(self, block: BlockMeta, now: float, is_background: bool) -> bool:
        """Whether HOST has (or, evicting its victim, makes) a free slot for `block`: it
        has one free, or the policy finds `block` worth HOST's own victim (`should_demote`,
        never for a background block) and HOST can make room. The one rule for a demoted
        block and for a commit written through to HOST (`BlockMoves.commit_to_host`)."""
        host = self.host
        return (host.num_blocks > 0
                and (host.num_free_blocks > 0 or not is_background and self.policy.should_demote(block, now))
                and self.make_room(Tier.HOST, now, block.tenant))

    def move(self, block: BlockMeta, dst_tier: Tier, now: float, *, announce_remove: bool = True) -> None:
        """Copy a cached block into a free slot of `dst_tier` and free its old slot.

        `announce_remove=False` when the caller already told the policy (to keep the
        block from being chosen as a victim while room was made for it).
        """
        src = self._pools[block.tier]
        dst = self._pools[dst_tier]
        dst_id = dst.take()
        if dst_id is None:
            raise RuntimeError(f"no free {dst_tier.value} slot for a move")
        if announce_remove:
            self.hide(block)
        if self._mover is not None:
            self._mover.copy_block(src.tier, block.id, dst_tier, dst_id)
        src.remove(block)
        block.tier = dst_tier
        block.id = dst_id
        dst.put(block)
        self._count(block.tenant, src.tier, -1)
        self._count(block.tenant, dst_tier, +1)
        self.num_cached[src.tier] -= 1
        self.num_cached[dst_tier] += 1
        self.emit(BlockRemoved((block.hash,), src.tier))
        self.emit(BlockStored((block.hash,), dst_tier, block.tenant, block.parent_hash))
        self.show(block, now)

    def show(self, block: BlockMeta, now: float) -> None:
        """Tell the policy and the background index a cached block entered its tier."""
        self.policy.on_insert(block, now)
        if block.is_background:
            self.background.evictable(block)

    def hide(self, block: BlockMeta) -> None:
        """Tell the policy and the background index a cached block leaves its tier (from
        now on no victim)."""
        self.policy.on_remove(block)
        if block.is_background:
            self.background.taken(block)

    def _background_victim(self, tier: Tier, now: float, tenant: str | None) -> BlockMeta | None:
        """The oldest background block of `tier` among the first few whose tenant is the
        one asking or holds more than its guaranteed share; None: ask the policy."""
        candidates = self.background.oldest(tier, MAX_BACKGROUND_SKIPS + 1) if self.evict_background_first else []
        if not candidates:
            return None
        self.policy.on_full(tier, now)   # it learns the tier is full, as a policy asked would
        for block in candidates:
            if block.tenant == tenant or not self.policy.protects(block.tenant, tier):
                return block
        return None

    # ---- events --------------------------------------------------------------------

    def emit(self, event: CacheEvent) -> None:
        if self._events.maxlen is not None and len(self._events) == self._events.maxlen:
            self.num_dropped_events += 1
        self._events.append(event)

    def emit_stored(self, stored: list[BlockHash], tenant: str, tier: Tier = Tier.HOT) -> None:
        """Emit one `BlockStored` for a chain run of newly indexed blocks of `tier`, then
        empty `stored`."""
        if stored:
            parent_hash = self._by_hash[stored[0]].parent_hash
            self.emit(BlockStored(tuple(stored), tier, tenant, parent_hash))
            stored.clear()

    def take_events(self) -> list[CacheEvent]:
        events = list(self._events)
        self._events.clear()
        return events

    def _count(self, tenant: str, tier: Tier, delta: int) -> None:
        counts = self._tenant_blocks[tier]
        counts[tenant] = counts.get(tenant, 0) + delta
